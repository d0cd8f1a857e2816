//! What the SQLite floor (`floor.rs`) and the PostgreSQL one
//! (`floor_postgres.rs`) share: reading their arguments, the wall clock of
//! the rows they write, and the benchmark transcript (`benches/workload.py`,
//! as a JSON list of message dicts) as rows, encoded once before any timing.

use std::fs;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value as Json;

/// The `--flag value` pairs of the command line, or `None` when a flag is not
/// one of `known` (such as `cargo bench -- --quick`, meant for the criterion
/// benches): `program` then skips its run, saying so.
pub fn read_flags(program: &str, known: &[&str]) -> Option<Vec<(String, String)>> {
    let mut flags = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        // `cargo bench` adds `--bench`; a harness-less bench ignores it.
        if flag == "--bench" {
            continue;
        }
        if !known.contains(&flag.as_str()) {
            eprintln!(
                "{program}: {flag:?} is not one of its arguments (a criterion option or filter?): skipped"
            );
            return None;
        }
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        flags.push((flag, value));
    }
    Some(flags)
}

pub fn parse_list(text: &str) -> Vec<usize> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("a comma-separated list of integers"))
        .collect()
}

/// Seconds since the epoch, as hermes stamps its rows.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

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
