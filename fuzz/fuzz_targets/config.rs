//! Any config text either parses into a policy or is refused as `Error::Config` naming the file.
#![no_main]

use std::path::Path;

use cajaguard_core::Error;
use cajaguard_core::policy::{ConfigOrigin, Policy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let origin = ConfigOrigin {
        path: Path::new("/fuzz/policy.json"),
        user_home: Some(Path::new("/home/fuzz")),
    };
    match Policy::parse(text, &origin) {
        Ok(policy) => {
            for caps in policy.caps.values() {
                assert!(
                    caps.approval_above <= caps.per_transaction
                        && caps.per_transaction <= caps.window
                );
                assert!(
                    caps.window <= cajaguard_core::money::MAX_MINOR && caps.approval_above >= 0
                );
            }
            for m in &policy.merchants {
                assert_eq!(m, &m.to_ascii_lowercase());
            }
        }
        Err(Error::Config {
            file, json_path, ..
        }) => {
            assert_eq!(file, Path::new("/fuzz/policy.json"));
            assert!(json_path.starts_with('$'));
        }
        Err(other) => panic!("not a config error: {other}"),
    }
});
