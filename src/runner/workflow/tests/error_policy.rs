//! The `error_policy` section: its forms, defaults and the retries it implies.

use super::*;

#[test]
fn nested_sections_get_their_defaults() {
    let w = Workflow::parse(&with(
        "error_policy:\n  circuit_breaker: {}\n  retry_config: {}\n",
    ))
    .unwrap();
    let cb = w.error_policy.circuit_breaker.unwrap();
    assert_eq!(cb, CircuitBreakerConfig::default());
    assert_eq!(
        (
            cb.failure_threshold,
            cb.success_threshold,
            cb.half_open_requests
        ),
        (5, 2, 3)
    );
    assert_eq!(cb.timeout, Duration::from_secs(30));
    let retry = w.error_policy.retry_config.unwrap();
    assert_eq!(retry.max_attempts, 3);
    assert_eq!(
        retry.backoff,
        BackoffStrategy::Exponential {
            initial: Duration::from_secs(1),
            multiplier: 2.0
        }
    );
    assert!(!retry.jitter);
    assert_eq!(retry.jitter_factor, 0.1);
    assert_eq!(retry.max_delay, None);
}

#[test]
fn on_item_failure_forms() {
    for (text, expected) in [
        ("dlq", OnItemFailure::Dlq),
        ("retry", OnItemFailure::Retry),
        ("skip", OnItemFailure::Skip),
        ("stop", OnItemFailure::Stop),
    ] {
        let w = Workflow::parse(&with(&format!(
            "error_policy:\n  on_item_failure: {text}\n"
        )));
        assert_eq!(w.unwrap().error_policy.on_item_failure, expected);
        assert_eq!(expected.to_string(), text);
    }
}

#[test]
fn error_collection_forms() {
    for (text, expected) in [
        ("aggregate", ErrorCollection::Aggregate),
        ("immediate", ErrorCollection::Immediate),
        (
            "{ batched: { size: 3 } }",
            ErrorCollection::Batched { size: 3 },
        ),
    ] {
        let w = Workflow::parse(&with(&format!(
            "error_policy:\n  error_collection: {text}\n"
        )));
        assert_eq!(w.unwrap().error_policy.error_collection, expected);
    }
}

#[test]
fn backoff_forms() {
    let ms = Duration::from_millis;
    for (text, expected) in [
        (
            "{ fixed: { delay: 2s } }",
            BackoffStrategy::Fixed { delay: ms(2000) },
        ),
        (
            "{ linear: { initial: 1s, increment: 500ms } }",
            BackoffStrategy::Linear {
                initial: ms(1000),
                increment: ms(500),
            },
        ),
        (
            "{ exponential: { initial: 100ms, multiplier: 1.5 } }",
            BackoffStrategy::Exponential {
                initial: ms(100),
                multiplier: 1.5,
            },
        ),
        (
            "{ fibonacci: { initial: 2m } }",
            BackoffStrategy::Fibonacci {
                initial: ms(120_000),
            },
        ),
    ] {
        let yaml = format!("error_policy:\n  retry_config:\n    backoff: {text}\n");
        let w = Workflow::parse(&with(&yaml)).unwrap();
        assert_eq!(
            w.error_policy.retry_config.unwrap().backoff,
            expected,
            "{text}"
        );
    }
}

#[test]
fn custom_handler_message_lists_known_handlers() {
    let (_, message) = invalid_field(&with(
        "error_policy:\n  on_item_failure: custom:missing\nhandlers:\n  notify: [ { shell: ls } ]\n",
    ));
    assert!(
        message.contains("missing") && message.contains("notify"),
        "{message}"
    );
}

#[test]
fn effective_retry_follows_policy() {
    let mut w = Workflow::parse(MINIMAL).unwrap();
    assert_eq!(w.effective_retry().max_attempts, 1);
    w.error_policy.on_item_failure = OnItemFailure::Retry;
    assert_eq!(w.effective_retry(), RetryConfig::default());
    assert_eq!(w.effective_retry().max_attempts, 3);
    let custom = RetryConfig {
        max_attempts: 7,
        ..RetryConfig::default()
    };
    w.error_policy.on_item_failure = OnItemFailure::Dlq;
    w.error_policy.retry_config = Some(custom.clone());
    assert_eq!(w.effective_retry(), custom);
}
