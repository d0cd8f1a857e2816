//! The benchmark transcript (`benches/workload.py`, as a JSON list of message
//! dicts) as rows to write, encoded once before any timing: shared by the
//! SQLite floor (`floor.rs`) and the PostgreSQL one (`floor_postgres.rs`).

use std::fs;
use std::path::Path;

use serde_json::Value as Json;

/// One message row, encoded once before timing.
pub struct Row {
    pub role: String,
    pub content: Option<String>,
    pub tool_call_id: Option<String>,
    pub tool_calls: Option<String>,
    pub tool_call_count: i64,
    pub tool_name: Option<String>,
}

pub fn load_rows(path: &Path) -> Vec<Row> {
    let text = fs::read_to_string(path).expect("read the messages");
    let list: Vec<Json> = serde_json::from_str(&text).expect("--messages is a JSON list");
    let str_of = |m: &Json, k: &str| m.get(k).and_then(Json::as_str).map(str::to_owned);
    list.iter()
        .map(|m| {
            let calls = m.get("tool_calls").filter(|c| !c.is_null());
            Row {
                role: str_of(m, "role").expect("role"),
                content: str_of(m, "content"),
                tool_call_id: str_of(m, "tool_call_id"),
                tool_calls: calls.map(|c| c.to_string()),
                tool_call_count: calls.and_then(Json::as_array).map_or(0, |a| a.len() as i64),
                tool_name: str_of(m, "tool_name"),
            }
        })
        .collect()
}
