//! The example configs in `examples/` are read by the same parser as any config: a typo there
//! would teach every reader a config that does not start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use cajaguard_core::agent::AgentId;
use cajaguard_core::policy::{ConfigOrigin, JwksSource, Mode, Policy};

fn example(name: &str) -> Policy {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let origin = ConfigOrigin {
        path: &path,
        user_home: Some(Path::new("/home/ana")),
    };
    Policy::parse(&text, &origin).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn the_service_example_parses_with_its_agents_and_issuer() {
    let p = example("service/cajaguard.service.json");
    assert_eq!(p.mode, Mode::Live);
    let serve = p.serve.as_ref().expect("a serve object");
    assert_eq!(serve.listen.to_string(), "127.0.0.1:8376");
    let shopper = AgentId::parse("ci-shopper").unwrap();
    let own = p.agent_caps(&shopper).unwrap();
    assert_eq!(own["USD"].per_transaction, 10000);
    // Any other agent falls under agent_caps.
    let other = p
        .agent_caps(&AgentId::parse("someone-else").unwrap())
        .unwrap();
    assert_eq!(other["USD"].per_transaction, 5000);
    let oauth = serve.oauth.as_ref().expect("oauth");
    assert_eq!(oauth.agent_claim, "sub");
    assert!(matches!(&oauth.jwks, JwksSource::Url(url) if url.scheme() == "https"));
}

#[test]
fn the_demo_example_parses() {
    let p = example("cajaguard.demo.json");
    assert_eq!(p.mode, Mode::Test);
    assert!(p.serve.is_none());
}
