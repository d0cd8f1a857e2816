//! Shared setup for the neutral layer's tests: a store's columns without a
//! store, a one-message append, and a wait for what a background thread does.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::columns::Columns;
use super::{Location, Relation, WriteOp};
use crate::model::NewMessage;

pub fn at() -> Location {
    Location::File(PathBuf::from("/data/state.db"))
}

/// The columns of a small store at [`at`].
pub fn columns() -> Columns {
    Columns::read(&at(), |relation| -> Result<_, ()> {
        Ok(match relation {
            Relation::Sessions => vec!["id", "source", "title", "message_count"],
            Relation::Messages => vec!["id", "session_id", "content", "active"],
            Relation::GatewayRouting => vec!["scope", "session_key", "entry_json"],
            Relation::StateMeta => vec!["key", "value"],
            Relation::CompressionLocks => vec!["session_id", "holder", "expires_at"],
            Relation::SessionModelUsage => vec!["session_id", "model", "input_tokens"],
            Relation::TelegramTopicModes => vec!["chat_id", "user_id", "enabled"],
            Relation::TelegramTopicBindings => vec!["chat_id", "thread_id", "session_id"],
            Relation::Responses => vec!["id", "caller", "response_json"],
        }
        .into_iter()
        .map(String::from)
        .collect())
    })
    .unwrap()
}

/// One user message appended to `session_id`.
pub fn append(session_id: &str) -> WriteOp {
    WriteOp::Append {
        session_id: session_id.into(),
        rows: vec![NewMessage::text("user", "x", 1.0)],
        once_key: None,
    }
}

/// Returns once `what` holds; fails the test if it does not within 10 s.
pub fn wait_until(what: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !what() {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(2));
    }
}
