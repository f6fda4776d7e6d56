//! The rest of an event stream, read after its answer so that its connection can be used again.
//!
//! The answer is passed on as soon as it is read; what follows it (usually only the stream's
//! end) is read here, on one thread per endpoint, and the HTTP client keeps a connection for the
//! next request only once its body has been read to the end. Without this every call opened a
//! new connection to the shop: a connect, an accept at the shop and a close per call.
//!
//! Bounded, and never in the way: streams are read one at a time, at most one waits for its turn,
//! and no more than [`MAX_DRAINED_BYTES`] is read from each; any other stream is dropped at once,
//! closing its connection, which is what happened to every stream before. A
//! shop that holds a stream open after its answer holds the thread until the request's own
//! timeout (the client's), and meanwhile its streams are simply closed.

use std::io::Read;
use std::sync::OnceLock;
use std::sync::mpsc::{self, SyncSender, TrySendError};

/// Past the answer an MCP stream should hold only its end; a shop that goes on sending is not
/// worth keeping the connection of.
const MAX_DRAINED_BYTES: u64 = 64 * 1024;

pub type Rest = Box<dyn Read + Send>;

#[derive(Default)]
pub struct Drain {
    thread: OnceLock<Option<SyncSender<Rest>>>,
}

impl Drain {
    /// Reads `rest` to its end in the background when the drain thread is free; drops it (closing
    /// its connection) otherwise.
    pub fn finish(&self, rest: Rest) {
        let Some(sender) = self.thread.get_or_init(start) else {
            return;
        };
        // Full: the thread is busy and one stream already waits; this one is closed instead.
        match sender.try_send(rest) {
            Ok(()) | Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {}
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
