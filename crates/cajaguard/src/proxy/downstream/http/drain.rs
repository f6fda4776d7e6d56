//! The rest of an event stream, read after its answer so that its connection can be used again.
//!
//! The answer is passed on as soon as it is read; what follows it (usually only the stream's
//! end) is read here, on one thread per endpoint, and the HTTP client keeps a connection for the
//! next request only once its body has been read to the end. Without this every call opened a
//! new connection to the shop: a connect, an accept at the shop and a close per call.
//!
//! Bounded, and never in the way: streams are read one at a time, at most one waits for its turn,
//! and no more than [`MAX_DRAINED_BYTES`] is read from each; any other stream is dropped at once,
//! closing its connection, which is what happened to every stream before. A shop that holds a
//! stream open after its answer holds the thread until the request's own timeout, and meanwhile
//! its other streams are simply closed.

use std::io::Read;
use std::sync::OnceLock;
use std::sync::mpsc::{self, SyncSender};

/// Past the answer an MCP stream should hold only its end; a shop that goes on sending is not
/// worth keeping the connection of.
const MAX_DRAINED_BYTES: u64 = 64 * 1024;

pub type Rest = Box<dyn Read + Send>;

#[derive(Default)]
pub struct Drain {
    thread: OnceLock<Option<SyncSender<Rest>>>,
}

impl Drain {
    /// Reads `rest` to its end in the background when the drain thread can take it; drops it
    /// (closing its connection) when the thread is busy and another stream already waits.
    pub fn finish(&self, rest: Rest) {
        if let Some(sender) = self.thread.get_or_init(start) {
            // A stream the thread cannot take comes back in the error, and is dropped with it.
            let _ = sender.try_send(rest);
        }
    }
}

fn start() -> Option<SyncSender<Rest>> {
    // One stream may wait while another is read: the end of a stream usually follows its answer
    // within microseconds, but a shop whose server holds small writes back (Nagle's algorithm
    // meeting a delayed acknowledgement) sends it some 40 ms later.
    let (sender, streams) = mpsc::sync_channel::<Rest>(1);
    let spawned = std::thread::Builder::new()
        .name("shop-drain".into())
        .spawn(move || {
            for rest in streams {
                let mut limited = rest.take(MAX_DRAINED_BYTES);
                // An error or the limit ends the stream's connection; nothing waits on it.
                let _ = std::io::copy(&mut limited, &mut std::io::sink());
            }
        });
    match spawned {
        Ok(_) => Some(sender),
        Err(e) => {
            tracing::debug!("no thread to finish the shop's streams ({e}); each call reconnects");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc::Receiver;
    use std::time::{Duration, Instant};

    use super::*;

    /// A stream that counts the bytes read from it and its drop; `held` keeps it open (reads
    /// block) until the sender goes away.
    struct Stream {
        held: Option<Receiver<()>>,
        endless: bool,
        read: Arc<AtomicUsize>,
        dropped: Arc<AtomicUsize>,
    }

    impl Read for Stream {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if let Some(held) = &self.held {
                let _ = held.recv();
            }
            if !self.endless {
                return Ok(0);
            }
            buf.fill(b'x');
            self.read.fetch_add(buf.len(), Ordering::SeqCst);
            Ok(buf.len())
        }
    }

    impl Drop for Stream {
        fn drop(&mut self) {
            self.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn wait_for(what: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !what() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    #[test]
    fn a_held_stream_never_makes_the_caller_wait_and_the_rest_are_dropped() {
        let drain = Drain::default();
        let dropped = Arc::new(AtomicUsize::new(0));
        let (release, held) = mpsc::channel();
        let mut held = Some(held);
        for _ in 0..4 {
            drain.finish(Box::new(Stream {
                held: held.take(),
                endless: false,
                read: Arc::default(),
                dropped: dropped.clone(),
            }));
        }
        // The first holds the thread and at most one more waits: the others were dropped (their
        // connections closed) before `finish` returned.
        assert!(dropped.load(Ordering::SeqCst) >= 2);
        drop(release);
        assert!(wait_for(|| dropped.load(Ordering::SeqCst) == 4));
    }

    #[test]
    fn a_stream_that_goes_on_sending_is_read_no_further_than_the_bound() {
        let drain = Drain::default();
        let (read, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        drain.finish(Box::new(Stream {
            held: None,
            endless: true,
            read: read.clone(),
            dropped: dropped.clone(),
        }));
        assert!(wait_for(|| dropped.load(Ordering::SeqCst) == 1));
        assert_eq!(read.load(Ordering::SeqCst) as u64, MAX_DRAINED_BYTES);
    }
}
