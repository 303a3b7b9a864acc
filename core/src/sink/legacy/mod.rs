//! Format 2 of the sink (the event log in sled with a journal), read only to migrate a data
//! directory to format 3 when it is opened ([`migrate`]).

pub(super) mod journal;
pub(super) mod journal_record;
pub(super) mod migrate;
