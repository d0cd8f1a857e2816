//! Owned values that cross from Python into storage and back.
//!
//! Everything here is plain Rust data, so the GIL can be released while it
//! is written or read.

use std::sync::Arc;

pub use rusqlite::types::Value;

/// One message row to insert, already encoded.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    pub role: String,
    pub content: Value,
    pub tool_call_id: Option<String>,
    pub tool_calls: Option<String>,
    /// How many tool calls `tool_calls` holds: added to `sessions.tool_call_count`.
    pub tool_call_count: i64,
    pub tool_name: Option<String>,
    pub effect_disposition: Option<String>,
    pub timestamp: f64,
    pub token_count: Option<i64>,
    pub finish_reason: Option<String>,
    pub reasoning: Option<String>,
    pub reasoning_content: Option<String>,
    pub reasoning_details: Option<String>,
    pub codex_reasoning_items: Option<String>,
    pub codex_message_items: Option<String>,
    pub platform_message_id: Option<String>,
    pub observed: bool,
    pub api_content: Option<String>,
}

impl NewMessage {
    /// A bare row: role and text content, stamped now.
    pub fn text(role: &str, content: &str, timestamp: f64) -> Self {
        NewMessage {
            role: role.to_owned(),
            content: Value::Text(content.to_owned()),
            tool_call_id: None,
            tool_calls: None,
            tool_call_count: 0,
            tool_name: None,
            effect_disposition: None,
            timestamp,
            token_count: None,
            finish_reason: None,
            reasoning: None,
            reasoning_content: None,
            reasoning_details: None,
            codex_reasoning_items: None,
            codex_message_items: None,
            platform_message_id: None,
            observed: false,
            api_content: None,
        }
    }
}

/// A row read back: column names shared by all rows of one query.
#[derive(Debug, Clone)]
pub struct Row {
    pub columns: Arc<[String]>,
    pub values: Vec<Value>,
}

/// Seconds since the Unix epoch, as SQLite `REAL` timestamps are stored.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The columns of a message read, in this order (see [`msg`] for indices).
pub const MESSAGE_COLUMNS: &str = "id, session_id, role, content, tool_call_id, tool_calls, \
    tool_name, effect_disposition, timestamp, token_count, finish_reason, reasoning, \
    reasoning_content, reasoning_details, codex_reasoning_items, codex_message_items, \
    platform_message_id, observed, active, compacted, api_content";

/// Positions of [`MESSAGE_COLUMNS`] in a message [`Row`].
pub mod msg {
    pub const ROLE: usize = 2;
    pub const CONTENT: usize = 3;
    pub const TOOL_CALL_ID: usize = 4;
    pub const TOOL_CALLS: usize = 5;
    pub const TOOL_NAME: usize = 6;
    pub const EFFECT_DISPOSITION: usize = 7;
    pub const TIMESTAMP: usize = 8;
    pub const FINISH_REASON: usize = 10;
    pub const REASONING: usize = 11;
    pub const REASONING_CONTENT: usize = 12;
    pub const REASONING_DETAILS: usize = 13;
    pub const CODEX_REASONING_ITEMS: usize = 14;
    pub const CODEX_MESSAGE_ITEMS: usize = 15;
    pub const PLATFORM_MESSAGE_ID: usize = 16;
    pub const OBSERVED: usize = 17;
    pub const API_CONTENT: usize = 20;
}
