//! The PostgreSQL floor: the benchmark's rows written and read by a bare
//! tokio-postgres program on the server under test, with no Python, no
//! encoding and no bookkeeping beyond the session counters. A flush is ONE
//! statement in autocommit (the counters' `UPDATE` in a CTE and every row
//! inserted from one array per column): one round trip and the commit's WAL
//! flush, the least any client can do for a durable turn. `benches/run.py
//! --postgres` reports every system's figures beside these.
//!
//! ```text
//! cargo bench --bench floor_postgres -- --url postgresql://USER@HOST:PORT/DB \
//!     --messages msgs.json --sync FULL --turns 1,20,1000 --total 10000 --out floor.json
//! ```
//!
//! The database must hold hermes' schema (`run.py` opens a fresh one with
//! `SessionDB` first); the floor inserts its own session rows. `--sync FULL`
//! runs with `synchronous_commit` on, `NORMAL` with it off. `--only
//! growth,reads` measures a subset. Output: one JSON document of raw
//! nanosecond samples, as `floor.rs` writes (`--out -` for stdout). Without
//! `--url` (a plain `cargo bench`) it skips its run.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value as Json};
use tokio::runtime::Runtime;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls};

#[path = "workload_rows.rs"]
mod workload_rows;
use workload_rows::{load_rows, Row};

struct Args {
    url: String,
    messages: PathBuf,
    sync: String,
    turns: Vec<usize>,
    total: usize,
    reads: usize,
    only: Vec<String>,
    out: PathBuf,
}

fn parse_list(text: &str) -> Vec<usize> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("a comma-separated list of integers"))
        .collect()
}

/// The arguments, or `None` without `--url` or with an argument that is not
/// the floor's (a criterion option): it then skips its run.
fn parse_args() -> Option<Args> {
    let mut flags: BTreeMap<String, String> = BTreeMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue;
        }
        let known = [
            "--url",
            "--messages",
            "--sync",
            "--turns",
            "--total",
            "--reads",
            "--only",
            "--out",
        ];
        if !known.contains(&flag.as_str()) {
            eprintln!("floor_postgres: {flag:?} is not one of its arguments: skipped");
            return None;
        }
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        flags.insert(flag, value);
    }
    let Some(url) = flags.remove("--url") else {
        eprintln!("floor_postgres: no --url (a PostgreSQL server with hermes' schema): skipped");
        return None;
    };
    let take = |flags: &mut BTreeMap<String, String>, k: &str, default: &str| {
        flags.remove(k).unwrap_or_else(|| default.to_owned())
    };
    let sync = take(&mut flags, "--sync", "FULL").to_ascii_uppercase();
    assert!(sync == "FULL" || sync == "NORMAL", "--sync FULL|NORMAL");
    Some(Args {
        url,
        messages: take(&mut flags, "--messages", "").into(),
        sync,
        turns: parse_list(&take(&mut flags, "--turns", "1,20,1000")),
        total: take(&mut flags, "--total", "2000")
            .parse()
            .expect("--total N"),
        reads: take(&mut flags, "--reads", "20")
            .parse()
            .expect("--reads N"),
        only: take(&mut flags, "--only", "")
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        out: take(&mut flags, "--out", "-").into(),
    })
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The one statement of a flush.
const FLUSH: &str = "WITH s AS (
    UPDATE sessions SET message_count = COALESCE(message_count, 0) + $1,
        tool_call_count = COALESCE(tool_call_count, 0) + $2
    WHERE id = $3 RETURNING id)
INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name,
    timestamp, observed, active)
SELECT s.id, r.role, r.content, r.tool_call_id, r.tool_calls, r.tool_name, $9, 0, 1
FROM s, unnest($4, $5, $6, $7, $8) WITH ORDINALITY
    AS r(role, content, tool_call_id, tool_calls, tool_name, n)
ORDER BY r.n";

/// A loaded message: its text columns, its timestamp and `observed`.
type LoadedRow = (Vec<Option<String>>, Option<f64>, Option<i64>);

struct Floor {
    runtime: Runtime,
    client: Client,
}

impl Floor {
    fn connect(args: &Args, sync: &str) -> Floor {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .expect("a tokio runtime");
        let (client, connection) = runtime
            .block_on(tokio_postgres::connect(&args.url, NoTls))
            .unwrap_or_else(|e| panic!("connect to {}: {e}", args.url));
        runtime.spawn(connection);
        let level = if sync == "FULL" { "on" } else { "off" };
        runtime
            .block_on(client.batch_execute(&format!("SET synchronous_commit TO {level}")))
            .expect("set synchronous_commit");
        Floor { runtime, client }
    }

    fn session(&self, id: &str) {
        self.runtime
            .block_on(self.client.query_typed(
                "INSERT INTO sessions (id, source, started_at) VALUES ($1, 'cli', $2)",
                &[(&id, Type::TEXT), (&now(), Type::FLOAT8)],
            ))
            .expect("create the session");
    }

    /// One flush, one statement. Returns ns.
    fn flush(&self, session: &str, rows: &[Row]) -> u64 {
        let start = Instant::now();
        let count = rows.len() as i64;
        let calls: i64 = rows.iter().map(|r| r.tool_call_count).sum();
        let role: Vec<&str> = rows.iter().map(|r| r.role.as_str()).collect();
        let content: Vec<Option<&str>> = rows.iter().map(|r| r.content.as_deref()).collect();
        let call_id: Vec<Option<&str>> = rows.iter().map(|r| r.tool_call_id.as_deref()).collect();
        let tool_calls: Vec<Option<&str>> = rows.iter().map(|r| r.tool_calls.as_deref()).collect();
        let tool_name: Vec<Option<&str>> = rows.iter().map(|r| r.tool_name.as_deref()).collect();
        let ts = now();
        let text = Type::TEXT_ARRAY;
        let params: [(&(dyn ToSql + Sync), Type); 9] = [
            (&count, Type::INT8),
            (&calls, Type::INT8),
            (&session, Type::TEXT),
            (&role, text.clone()),
            (&content, text.clone()),
            (&call_id, text.clone()),
            (&tool_calls, text.clone()),
            (&tool_name, text),
            (&ts, Type::FLOAT8),
        ];
        self.runtime
            .block_on(self.client.query_typed(FLUSH, &params))
            .expect("the flush statement");
        start.elapsed().as_nanos() as u64
    }

    /// The whole transcript into owned values (the columns a load reads); returns (ns, rows).
    fn load(&self, session: &str) -> (u64, usize) {
        let start = Instant::now();
        let rows = self
            .runtime
            .block_on(self.client.query_typed(
                "SELECT role, content, tool_call_id, tool_calls, tool_name, effect_disposition,
                    timestamp, finish_reason, reasoning, reasoning_content, reasoning_details,
                    codex_reasoning_items, codex_message_items, platform_message_id, observed,
                    api_content FROM messages WHERE session_id = $1 AND active = 1 ORDER BY id",
                &[(&session, Type::TEXT)],
            ))
            .expect("the load");
        let owned: Vec<LoadedRow> = rows
            .iter()
            .map(|r| {
                let texts = (0..16)
                    .filter(|&i| i != 6 && i != 14)
                    .map(|i| r.get::<_, Option<String>>(i))
                    .collect();
                (texts, r.get(6), r.get(14))
            })
            .collect();
        let ns = start.elapsed().as_nanos() as u64;
        (ns, std::hint::black_box(owned).len())
    }

    /// The guard read: the session's live `message_count`. Returns ns.
    fn count(&self, session: &str) -> u64 {
        let start = Instant::now();
        let rows = self
            .runtime
            .block_on(self.client.query_typed(
                "SELECT message_count FROM sessions WHERE id = $1",
                &[(&session, Type::TEXT)],
            ))
            .expect("the count");
        std::hint::black_box(rows[0].get::<_, Option<i64>>(0));
        start.elapsed().as_nanos() as u64
    }
}

/// Grows a transcript to `total` in turns of `turn`; one sample per flush.
fn growth(args: &Args, rows: &[Row], turn: usize) -> Json {
    let floor = Floor::connect(args, &args.sync);
    let session = format!("floor-growth-{turn}");
    floor.session(&session);
    let total = args.total.min(rows.len());
    let samples: Vec<u64> = rows[..total]
        .chunks(turn)
        .map(|chunk| floor.flush(&session, chunk))
        .collect();
    json!({"turn": turn, "messages": total, "flush_ns": samples})
}

/// Transcript load and the guard read, on a transcript of `total` (seeded
/// without waiting for the WAL flush).
fn reads(args: &Args, rows: &[Row]) -> Json {
    let floor = Floor::connect(args, "NORMAL");
    let session = "floor-reads";
    floor.session(session);
    let total = args.total.min(rows.len());
    for chunk in rows[..total].chunks(1000) {
        floor.flush(session, chunk);
    }
    let mut load_ns = Vec::new();
    let mut loaded = 0;
    for _ in 0..args.reads {
        let (ns, n) = floor.load(session);
        load_ns.push(ns);
        loaded = n;
    }
    let count_ns: Vec<u64> = (0..10_000).map(|_| floor.count(session)).collect();
    json!({"messages": loaded, "load_ns": load_ns, "count_ns": count_ns})
}

fn main() {
    let Some(args) = parse_args() else {
        return;
    };
    let rows = load_rows(&args.messages);
    let wants = |part: &str| args.only.is_empty() || args.only.iter().any(|p| p == part);
    let mut flushes = BTreeMap::new();
    if wants("growth") {
        for &turn in &args.turns {
            flushes.insert(format!("{turn}/statement"), growth(&args, &rows, turn));
        }
    }
    let doc = json!({
        "system": "floor",
        "sync": args.sync,
        "flush": flushes,
        "reads": if wants("reads") { reads(&args, &rows) } else { Json::Null },
    });
    if args.out.as_os_str() == "-" {
        println!("{doc}");
    } else {
        fs::write(&args.out, doc.to_string()).expect("write --out");
    }
}
