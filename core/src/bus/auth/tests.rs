//! Tests of the plan, the URL parsing and redaction, and the key files.

use super::key_files::read_seed;
use super::*;
use crate::bus::BusConfig;

fn config(url: &str) -> BusConfig {
    BusConfig {
        url: url.into(),
        ..BusConfig::default()
    }
}

#[test]
fn url_user_and_password_are_parsed_decoded_and_stripped() {
    let parsed = parse_server("nats://al%40ice:p%3Ass@nats.example:4222/x").unwrap();
    assert_eq!(parsed.url, "nats://nats.example:4222/x");
    assert_eq!(parsed.host, "nats.example");
    assert_eq!(
        parsed.credentials,
        Some(UrlCredentials::UserPassword {
            user: "al@ice".into(),
            password: Secret::new("p:ss"),
        })
    );
}

#[test]
fn url_token_ipv6_and_no_scheme() {
    let parsed = parse_server("tls://s3cr3t@[::1]:4443").unwrap();
    assert_eq!(parsed.url, "tls://[::1]:4443");
    assert_eq!(parsed.host, "::1");
    assert!(parsed.is_tls());
    assert_eq!(
        parsed.credentials,
        Some(UrlCredentials::Token(Secret::new("s3cr3t")))
    );
    let bare = parse_server("localhost:4222").unwrap();
    assert_eq!(
        (bare.url.as_str(), bare.host.as_str()),
        ("localhost:4222", "localhost")
    );
    assert_eq!(bare.credentials, None);
    assert!(parse_server("nats://u:p@:4222").is_err());
    assert!(parse_server("nats://u:%zz@h").is_err());
}

#[test]
fn redaction_hides_url_credentials_and_secrets() {
    assert_eq!(
        redact_url("nats://u:pw@a:1, tls://tok@b:2,nats://c:3"),
        "nats://<redacted>@a:1, tls://<redacted>@b:2,nats://c:3"
    );
    let mut config = config("nats://u:hunter2@127.0.0.1:4222");
    config.auth.token = Some(Secret::new("tok-hunter3"));
    let shown = format!("{config:?} {}", serde_json::to_string(&config).unwrap());
    assert!(
        !shown.contains("hunter2") && !shown.contains("hunter3"),
        "{shown}"
    );
}

#[test]
fn url_credentials_become_the_method() {
    let plan = Plan::new(&config(
        "nats://u:pw@127.0.0.1:4222,nats://u:pw@localhost:5222",
    ))
    .unwrap();
    assert_eq!(
        plan.method,
        Method::UserPassword("u".into(), Secret::new("pw"))
    );
    assert_eq!(
        plan.servers,
        ["nats://127.0.0.1:4222", "nats://localhost:5222"]
    );
    let plan = Plan::new(&config("nats://tok@127.0.0.1")).unwrap();
    assert_eq!(plan.method, Method::Token(Secret::new("tok")));
}

#[test]
fn conflicting_or_double_credentials_are_refused() {
    assert!(Plan::new(&config("nats://a:1@127.0.0.1,nats://b:2@127.0.0.1")).is_err());
    let mut both = config("nats://a:1@127.0.0.1");
    both.auth.nkey = Some("/k".into());
    assert!(Plan::new(&both).is_err());
    let mut two = config("nats://127.0.0.1");
    two.auth.creds = Some("/c".into());
    two.auth.token = Some(Secret::new("t"));
    let err = Plan::new(&two).unwrap_err().to_string();
    assert!(err.contains("more than one"), "{err}");
    let mut password_only = config("nats://127.0.0.1");
    password_only.auth.password = Some(Secret::new("p"));
    assert!(Plan::new(&password_only).is_err());
    let mut half_pair = config("nats://127.0.0.1");
    half_pair.tls.cert = Some("/c.pem".into());
    assert!(Plan::new(&half_pair).is_err());
}

#[test]
fn a_user_alone_is_a_token() {
    let mut alone = config("nats://127.0.0.1");
    alone.auth.user = Some(Secret::new("tok"));
    assert_eq!(
        Plan::new(&alone).unwrap().method,
        Method::Token(Secret::new("tok"))
    );
}

#[test]
fn plaintext_credentials_off_loopback_need_tls_or_the_switch() {
    let err = Plan::new(&config("nats://u:pw@nats.example:4222"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("plain text") && err.contains("--allow-insecure-credentials"),
        "{err}"
    );
    assert!(!err.contains("pw"), "{err}");
    assert!(
        Plan::new(&config("tls://u:pw@nats.example:4222"))
            .unwrap()
            .tls
    );
    let mut with_ca = config("nats://u:pw@nats.example:4222");
    with_ca.tls.ca = Some("/ca.pem".into());
    assert!(Plan::new(&with_ca).is_ok());
    let mut allowed = config("nats://u:pw@nats.example:4222");
    allowed.auth.allow_insecure_credentials = true;
    assert!(Plan::new(&allowed).is_ok());
    let mut nkey = config("nats://nats.example:4222");
    nkey.auth.nkey = Some("/seed".into());
    assert!(Plan::new(&nkey).is_ok(), "an NKey never sends its seed");
}

#[test]
fn loopback_hosts() {
    for host in ["localhost", "127.0.0.1", "127.1.2.3", "::1"] {
        assert!(is_loopback(host), "{host}");
    }
    for host in ["nats.example", "10.0.0.1", "::2"] {
        assert!(!is_loopback(host), "{host}");
    }
}

#[cfg(unix)]
#[test]
fn key_files_readable_by_others_are_noticed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed");
    std::fs::write(&path, "SUAAA\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(readable_by_others(&path));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(!readable_by_others(&path));
    assert_eq!(read_seed(&path).unwrap(), "SUAAA");
}
