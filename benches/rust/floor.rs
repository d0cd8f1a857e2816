//! The floor: the benchmark's rows written and read by a bare rusqlite
//! program, with no Python, no encoding and no bookkeeping beyond the
//! session counters. Every hermes figure is also reported as a multiple of
//! these numbers (see `benches/run.py`, which drives this binary).
//!
//! Usage (all paths prepared by `benches/run.py`):
//!
//! ```text
//! cargo bench --bench floor -- --template state.db --messages msgs.json \
//!     --sync FULL --turns 1,20,1000 --total 10000 --scaling 100,1000,10000 \
//!     --workdir DIR --out floor.json
//! ```
//!
//! `--only growth,reads,scaling,fsync` measures a subset.
//!
//! `--template` is an empty `state.db` created by hermes with one session
//! (`--session`, default `bench`), so the schema, indexes, FTS table and
//! triggers are exactly ours. `--messages` holds the transcript as message
//! dicts (`benches/workload.py`); rows are pre-encoded before any timing.
//!
//! Two variants of the flush are measured:
//! * `trigger`: the plain bare program: INSERT each row (the schema's FTS
//!   trigger indexes it), counters UPDATE, one `BEGIN IMMEDIATE` .. `COMMIT`;
//! * `setbased`: triggers off on this connection and the FTS rows added by
//!   one `INSERT .. SELECT` per transaction (what our writer does);
//! * `nofts`: triggers off and no FTS rows at all: what the same rows cost
//!   without a search index (the peers other than hermes-agent keep none).
//!
//! Output: one JSON document with raw nanosecond samples; statistics are
//! computed by the Python side, identically for every system. That is why
//! this is a plain harness and not criterion, which keeps its own statistics
//! and repeats one closure in batches: these workloads are stateful (a
//! transcript grows flush by flush).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rusqlite::config::DbConfig;
use rusqlite::{params, Connection};
use serde_json::{json, Value as Json};

struct Args {
    template: PathBuf,
    messages: PathBuf,
    session: String,
    sync: String,
    turns: Vec<usize>,
    total: usize,
    scaling: Vec<usize>,
    workdir: PathBuf,
    out: PathBuf,
    reads: usize,
    only: Vec<String>,
}

fn parse_list(text: &str) -> Vec<usize> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("a comma-separated list of integers"))
        .collect()
}

fn parse_args() -> Args {
    let mut args = Args {
        template: PathBuf::new(),
        messages: PathBuf::new(),
        session: "bench".into(),
        sync: "FULL".into(),
        turns: vec![1, 20, 1000],
        total: 10_000,
        scaling: vec![],
        workdir: std::env::temp_dir().join("hermes-floor"),
        out: PathBuf::from("-"),
        reads: 20,
        only: vec![],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        // `cargo bench` adds `--bench`; a harness-less bench ignores it.
        if flag == "--bench" {
            continue;
        }
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--template" => args.template = value.into(),
            "--messages" => args.messages = value.into(),
            "--session" => args.session = value,
            "--sync" => args.sync = value.to_ascii_uppercase(),
            "--turns" => args.turns = parse_list(&value),
            "--total" => args.total = value.parse().expect("--total N"),
            "--scaling" => args.scaling = parse_list(&value),
            "--workdir" => args.workdir = value.into(),
            "--out" => args.out = value.into(),
            "--reads" => args.reads = value.parse().expect("--reads N"),
            "--only" => args.only = value.split(',').map(str::to_owned).collect(),
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(
        !args.template.as_os_str().is_empty(),
        "--template is required"
    );
    assert!(
        !args.messages.as_os_str().is_empty(),
        "--messages is required"
    );
    assert!(
        args.sync == "FULL" || args.sync == "NORMAL",
        "--sync FULL|NORMAL"
    );
    args
}

/// One message row, encoded once before timing.
struct Row {
    role: String,
    content: Option<String>,
    tool_call_id: Option<String>,
    tool_calls: Option<String>,
    tool_call_count: i64,
    tool_name: Option<String>,
}

fn load_rows(path: &Path) -> Vec<Row> {
    let text = fs::read_to_string(path).expect("read --messages");
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Trigger,
    SetBased,
    NoFts,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Trigger => "trigger",
            Variant::SetBased => "setbased",
            Variant::NoFts => "nofts",
        }
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn fresh_db(args: &Args, name: &str, sync: &str, variant: Variant) -> (Connection, PathBuf) {
    fs::create_dir_all(&args.workdir).expect("create --workdir");
    let path = args.workdir.join(format!("{name}.db"));
    for suffix in ["", "-wal", "-shm"] {
        let _ = fs::remove_file(format!("{}{suffix}", path.display()));
    }
    fs::copy(&args.template, &path).expect("copy --template");
    let conn = Connection::open(&path).expect("open the copy");
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", sync).unwrap();
    conn.pragma_update(None, "foreign_keys", "ON").unwrap();
    if variant != Variant::Trigger {
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false)
            .unwrap();
    }
    (conn, path)
}

const INSERT: &str = "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls,
    tool_name, timestamp, observed, active) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, 1)";

/// One flush: the rows and the counters in one transaction. Returns ns.
fn flush(conn: &Connection, session: &str, rows: &[Row], variant: Variant) -> u64 {
    let start = Instant::now();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    let calls: i64 = rows.iter().map(|r| r.tool_call_count).sum();
    conn.prepare_cached(
        "UPDATE sessions SET message_count = message_count + ?1,
         tool_call_count = tool_call_count + ?2 WHERE id = ?3",
    )
    .unwrap()
    .execute(params![rows.len() as i64, calls, session])
    .unwrap();
    let ts = now();
    let mut first = 0;
    let mut last = 0;
    {
        let mut stmt = conn.prepare_cached(INSERT).unwrap();
        for (i, r) in rows.iter().enumerate() {
            let id = stmt
                .insert(params![
                    session,
                    r.role,
                    r.content,
                    r.tool_call_id,
                    r.tool_calls,
                    r.tool_name,
                    ts
                ])
                .unwrap();
            if i == 0 {
                first = id;
            }
            last = id;
        }
    }
    if variant == Variant::SetBased && !rows.is_empty() {
        conn.prepare_cached(
            "INSERT INTO messages_fts(rowid, content)
             SELECT id, COALESCE(content, '') || ' ' || COALESCE(tool_name, '') || ' ' ||
                    COALESCE(tool_calls, '') FROM messages WHERE id BETWEEN ?1 AND ?2",
        )
        .unwrap()
        .execute([first, last])
        .unwrap();
    }
    conn.execute_batch("COMMIT").unwrap();
    start.elapsed().as_nanos() as u64
}

/// Grows a transcript to `total` in turns of `turn`; one sample per flush.
fn growth(args: &Args, rows: &[Row], turn: usize, variant: Variant) -> Json {
    let name = format!("growth-{turn}-{}", variant.name());
    let (conn, _path) = fresh_db(args, &name, &args.sync, variant);
    let total = args.total.min(rows.len());
    let wall = Instant::now();
    let mut samples = Vec::with_capacity(total / turn + 1);
    let mut at = 0;
    while at < total {
        let end = (at + turn).min(total);
        samples.push(flush(&conn, &args.session, &rows[at..end], variant));
        at = end;
    }
    json!({
        "turn": turn,
        "messages": total,
        "wall_ns": wall.elapsed().as_nanos() as u64,
        "flush_ns": samples,
    })
}

const READ: &str = "SELECT id, session_id, role, content, tool_call_id, tool_calls, tool_name,
    effect_disposition, timestamp, token_count, finish_reason, reasoning, reasoning_content,
    reasoning_details, codex_reasoning_items, codex_message_items, platform_message_id, observed,
    active, compacted, api_content FROM messages WHERE session_id = ?1 AND active = 1 ORDER BY id";

/// Reads the whole transcript into owned values; returns (ns, rows).
fn load(conn: &Connection, session: &str) -> (u64, usize) {
    let start = Instant::now();
    let mut stmt = conn.prepare_cached(READ).unwrap();
    let width = stmt.column_count();
    let mut out: Vec<Vec<rusqlite::types::Value>> = Vec::new();
    let mut rows = stmt.query([session]).unwrap();
    while let Some(r) = rows.next().unwrap() {
        out.push((0..width).map(|i| r.get(i).unwrap()).collect());
    }
    let ns = start.elapsed().as_nanos() as u64;
    (ns, std::hint::black_box(out).len())
}

fn count(conn: &Connection, session: &str) -> u64 {
    let start = Instant::now();
    let n: i64 = conn
        .prepare_cached("SELECT message_count FROM sessions WHERE id = ?1")
        .unwrap()
        .query_row([session], |r| r.get(0))
        .unwrap();
    std::hint::black_box(n);
    start.elapsed().as_nanos() as u64
}

/// Transcript load and the live count read, on a transcript of `total`.
fn reads(args: &Args, rows: &[Row]) -> Json {
    let (conn, _path) = fresh_db(args, "reads", "OFF", Variant::SetBased);
    let total = args.total.min(rows.len());
    for chunk in rows[..total].chunks(1000) {
        flush(&conn, &args.session, chunk, Variant::SetBased);
    }
    seeded();
    let reader = Connection::open(args.workdir.join("reads.db")).unwrap();
    let mut load_ns = Vec::new();
    let mut loaded = 0;
    for _ in 0..args.reads {
        let (ns, n) = load(&reader, &args.session);
        load_ns.push(ns);
        loaded = n;
    }
    let count_ns: Vec<u64> = (0..10_000).map(|_| count(&reader, &args.session)).collect();
    json!({"messages": loaded, "load_ns": load_ns, "count_ns": count_ns})
}

/// Ends an unmeasured seeding, as the Python driver's `Bench.seeded` does:
/// the kernel writes the unsynced rows back now, not during the measured
/// calls that follow.
fn seeded() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// Flush latency (20-message turns) and load time as the transcript grows.
fn scaling(args: &Args, rows: &[Row]) -> Json {
    let (conn, path) = fresh_db(args, "scaling", &args.sync, Variant::SetBased);
    let reader = Connection::open(&path).unwrap();
    let mut points = Vec::new();
    let mut at = 0;
    for &size in &args.scaling {
        let size = size.min(rows.len());
        // Grow to `size` unmeasured, in big transactions, without fsync.
        conn.pragma_update(None, "synchronous", "OFF").unwrap();
        while at < size {
            let end = (at + 1000).min(size);
            flush(&conn, &args.session, &rows[at..end], Variant::SetBased);
            at = end;
        }
        conn.pragma_update(None, "synchronous", &args.sync).unwrap();
        seeded();
        let mut flush_ns = Vec::new();
        // Ten measured 20-message turns (the transcript grows by 200).
        for _ in 0..10 {
            let end = (at + 20).min(rows.len());
            flush_ns.push(flush(
                &conn,
                &args.session,
                &rows[at..end],
                Variant::SetBased,
            ));
            at = end;
        }
        let load_ns: Vec<u64> = (0..5).map(|_| load(&reader, &args.session).0).collect();
        points.push(json!({"size": size, "flush_ns": flush_ns, "load_ns": load_ns}));
    }
    Json::Array(points)
}

/// The disk's own floor: a one-row commit at FULL, and a bare fdatasync.
fn fsync(args: &Args) -> Json {
    fs::create_dir_all(&args.workdir).unwrap();
    let path = args.workdir.join("fsync.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
    let commit_ns: Vec<u64> = (0..300)
        .map(|i| {
            let start = Instant::now();
            conn.execute("INSERT INTO t (x) VALUES (?1)", [i]).unwrap();
            start.elapsed().as_nanos() as u64
        })
        .collect();
    let mut file = File::create(args.workdir.join("fsync.bin")).unwrap();
    let block = [7u8; 4096];
    let fdatasync_ns: Vec<u64> = (0..300)
        .map(|_| {
            file.write_all(&block).unwrap();
            let start = Instant::now();
            file.sync_data().unwrap();
            start.elapsed().as_nanos() as u64
        })
        .collect();
    json!({"commit_full_ns": commit_ns, "fdatasync_ns": fdatasync_ns})
}

impl Args {
    /// Whether `part` (growth, reads, scaling, fsync) is to be measured.
    fn wants(&self, part: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|p| p == part)
    }
}

fn main() {
    let args = parse_args();
    let rows = load_rows(&args.messages);
    let mut flushes = BTreeMap::new();
    if args.wants("growth") {
        for &turn in &args.turns {
            for variant in [Variant::Trigger, Variant::SetBased, Variant::NoFts] {
                flushes.insert(
                    format!("{turn}/{}", variant.name()),
                    growth(&args, &rows, turn, variant),
                );
            }
        }
    }
    let doc = json!({
        "system": "floor",
        "sqlite_version": rusqlite::version(),
        "sync": args.sync,
        "flush": flushes,
        "reads": if args.wants("reads") { reads(&args, &rows) } else { Json::Null },
        "scaling": if args.wants("scaling") && !args.scaling.is_empty() {
            scaling(&args, &rows)
        } else {
            Json::Null
        },
        "fsync": if args.wants("fsync") { fsync(&args) } else { Json::Null },
    });
    let text = doc.to_string();
    if args.out.as_os_str() == "-" {
        println!("{text}");
    } else {
        fs::write(&args.out, text).expect("write --out");
    }
    let _ = fs::remove_dir_all(&args.workdir);
}
