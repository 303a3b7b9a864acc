//! The node id the log's events carry, for a database that lost its own (sled's files moved
//! aside by a recovery hint, or damaged and recovered empty): the directory keeps its node id,
//! so its new events and the ones rebuilt from the log belong to one node.

use std::io::Read;
use std::path::Path;

use serde::Deserialize;

use crate::sink::config::MAX_VALUE_BYTES;
use crate::sink::log::{frame, segment};

/// Most bytes read of a segment: its header and a first frame of the largest event.
const READ_LIMIT: u64 = (segment::MAGIC.len() + MAX_VALUE_BYTES + 64) as u64;

#[derive(Deserialize)]
struct NodeOf {
    node_id: String,
}

/// The node id of the newest segment's first readable event in `log_dir`, if any.
pub(crate) fn node_id_in_log(log_dir: &Path) -> Option<String> {
    let mut firsts: Vec<u64> = std::fs::read_dir(log_dir)
        .ok()?
        .filter_map(
            |entry| match segment::classify(&entry.ok()?.file_name().to_string_lossy()) {
                segment::Kind::Segment(first) => Some(first),
                _ => None,
            },
        )
        .collect();
    firsts.sort_unstable();
    firsts.into_iter().rev().find_map(|first| {
        let file = std::fs::File::open(log_dir.join(segment::name(first))).ok()?;
        let mut bytes = Vec::new();
        file.take(READ_LIMIT).read_to_end(&mut bytes).ok()?;
        let (frame, _) = frame::decode(bytes.get(segment::MAGIC.len()..)?).ok()?;
        let node = serde_json::from_slice::<NodeOf>(frame.payload).ok()?;
        crate::domain::command::validate_id::<crate::sink::SinkError>("node_id", &node.node_id)
            .ok()
            .map(|()| node.node_id)
    })
}
