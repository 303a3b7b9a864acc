//! Who removes items and why: the [`RemovedBy`] an operator's clear, purge or delete names on
//! each `item_removed` event, from the API token's name (or `local` for a CLI command run on
//! the data directory itself) and the optional `--reason` / `reason`.

use dlq::domain::event::RemovedBy;

use super::RequestError;

/// The name a CLI command run on the data directory itself (not through an API) gives.
pub const LOCAL: &str = "local";

/// Longest reason accepted, in characters.
pub const MAX_REASON: usize = 500;

/// `name`, with `reason` checked: at most [`MAX_REASON`] characters and no control characters;
/// an empty reason is none.
pub fn removed_by(name: &str, reason: Option<&str>) -> Result<RemovedBy, RequestError> {
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    if let Some(text) = reason {
        if text.chars().count() > MAX_REASON {
            return Err(RequestError::Usage(format!(
                "the reason is longer than {MAX_REASON} characters: shorten it"
            )));
        }
        if text.chars().any(char::is_control) {
            return Err(RequestError::Usage(
                "the reason contains control characters (a newline?): give one line".into(),
            ));
        }
    }
    Ok(RemovedBy {
        name: name.to_owned(),
        reason: reason.map(str::to_owned),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_one_short_line() {
        let by = removed_by("ops", Some(" bad batch ")).unwrap();
        assert_eq!(
            (by.name.as_str(), by.reason.as_deref()),
            ("ops", Some("bad batch"))
        );
        assert_eq!(removed_by(LOCAL, Some("  ")).unwrap().reason, None);
        assert_eq!(removed_by(LOCAL, None).unwrap().reason, None);
        assert!(removed_by("ops", Some("a\nb")).is_err());
        assert!(removed_by("ops", Some(&"x".repeat(MAX_REASON + 1))).is_err());
        assert!(removed_by("ops", Some(&"x".repeat(MAX_REASON))).is_ok());
    }
}
