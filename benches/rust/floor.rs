//! The floor: the benchmark's rows written and read by a bare rusqlite
//! program, with no Python, no encoding and no bookkeeping beyond the
//! session counters. Every hermes figure is also reported as a multiple of
//! these numbers (see `benches/run.py`, which drives this binary).
//!
//! Usage: `cargo bench --bench floor` alone runs a small default pass (turns
//! of 1, 20 and 1000 messages to 2,000, reads, the disk floor) on a schema
//! created by the crate itself and the messages of `benches/workload.py`, and
//! prints medians. `benches/run.py` prepares everything and passes flags:
//!
//! ```text
//! cargo bench --bench floor -- --template state.db --messages msgs.json //!     --sync FULL --turns 1,20,1000 --total 10000 --scaling 100,1000,10000 //!     --workdir DIR --out floor.json
//! ```
//!
//! `--only growth,reads,scaling,fsync` measures a subset.
//!
//! `--template` is an empty `state.db` created by hermes with one session
//! (`--session`, default `bench`), so the schema, indexes, FTS table and
//! triggers are exactly ours; without it the floor creates one with
//! `schema::ensure`, as hermes does when it opens a new file. `--messages`
//! holds the transcript as message dicts (`benches/workload.py`; without it
//! the floor asks `python3 benches/workload.py N`, or `$PYO3_PYTHON`); rows
//! are pre-encoded before any timing.
//!
//! Two variants of the flush are measured:
//! * `trigger`: the plain bare program: INSERT each row (the schema's FTS
//!   trigger indexes it), counters UPDATE, one `BEGIN IMMEDIATE` .. `COMMIT`;
//! * `setbased`: triggers off on this connection and the FTS rows added by
//!   one `INSERT .. SELECT` per transaction (what our writer does);
//! * `nofts`: triggers off and no FTS rows at all: what the same rows cost
//!   without a search index (the peers other than hermes-agent keep none).
//!
//! Output (`--out FILE`, or `--out -` for stdout): one JSON document with raw
//! nanosecond samples; statistics are computed by the Python side,
//! identically for every system. That is why this is a plain harness and not
//! criterion, which keeps its own statistics and repeats one closure in
//! batches: these workloads are stateful (a transcript grows flush by flush).
//! Without `--out` it prints each part's median and p99 (nearest rank, the
//! rule of `benches/benchlib/stats.py`). Arguments it does not know (such as
//! `cargo bench -- --quick`, meant for the criterion benches) make it skip its
//! run.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rusqlite::config::DbConfig;
use rusqlite::{params, Connection};
use serde_json::{json, Value as Json};

#[path = "workload_rows.rs"]
mod workload_rows;
use workload_rows::{load_rows, Row};

struct Args {
    template: Option<PathBuf>,
    messages: Option<PathBuf>,
    session: String,
    sync: String,
    turns: Vec<usize>,
    total: usize,
    scaling: Vec<usize>,
    workdir: PathBuf,
    out: Option<PathBuf>,
    reads: usize,
    only: Vec<String>,
}

fn parse_list(text: &str) -> Vec<usize> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("a comma-separated list of integers"))
        .collect()
}

/// The arguments, or `None` when one is not the floor's (it then skips its run).
fn parse_args() -> Option<Args> {
    let mut args = Args {
        template: None,
        messages: None,
        session: "bench".into(),
        sync: "FULL".into(),
        turns: vec![1, 20, 1000],
        total: 2_000,
        scaling: vec![],
        workdir: std::env::temp_dir().join(format!("hermes-floor-{}", std::process::id())),
        out: None,
        reads: 20,
        only: vec![],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        // `cargo bench` adds `--bench`; a harness-less bench ignores it.
        if flag == "--bench" {
            continue;
        }
        let known = [
            "--template",
            "--messages",
            "--session",
            "--sync",
            "--turns",
            "--total",
            "--scaling",
            "--workdir",
            "--out",
            "--reads",
            "--only",
        ];
        if !known.contains(&flag.as_str()) {
            eprintln!(
                "floor: {flag:?} is not one of its arguments (a criterion option or filter?): skipped"
            );
            return None;
        }
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--template" => args.template = Some(value.into()),
            "--messages" => args.messages = Some(value.into()),
            "--session" => args.session = value,
            "--sync" => args.sync = value.to_ascii_uppercase(),
            "--turns" => args.turns = parse_list(&value),
            "--total" => args.total = value.parse().expect("--total N"),
            "--scaling" => args.scaling = parse_list(&value),
            "--workdir" => args.workdir = value.into(),
            "--out" => args.out = Some(value.into()),
            "--reads" => args.reads = value.parse().expect("--reads N"),
            _ => args.only = value.split(',').map(str::to_owned).collect(),
        }
    }
    assert!(
        args.sync == "FULL" || args.sync == "NORMAL",
        "--sync FULL|NORMAL"
    );
    Some(args)
}

/// An empty `state.db` with one session, when no `--template` was given: the
/// crate's own schema, created as hermes creates it in a new file.
fn own_template(args: &Args) -> PathBuf {
    fs::create_dir_all(&args.workdir).expect("create --workdir");
    let path = args.workdir.join("template.db");
    let conn = Connection::open(&path).expect("create the template");
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    _core::store::sqlite::ensure_schema(&conn).expect("create the schema");
    conn.execute(
        "INSERT INTO sessions (id, source, started_at) VALUES (?1, 'cli', ?2)",
        params![args.session, now()],
    )
    .unwrap();
    conn.execute_batch("COMMIT").unwrap();
    path
}

/// The transcript of `benches/workload.py` when no `--messages` was given:
/// the same messages every system is measured with.
fn workload_messages(args: &Args) -> PathBuf {
    let count = args
        .scaling
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(args.total)
        + 400;
    let python = std::env::var("PYO3_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/workload.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg(count.to_string())
        .output()
        .unwrap_or_else(|e| panic!("run {python} {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{python} {} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    fs::create_dir_all(&args.workdir).expect("create --workdir");
    let path = args.workdir.join("messages.json");
    fs::write(&path, out.stdout).expect("write the messages");
    path
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

fn fresh_db(
    args: &Args,
    template: &Path,
    name: &str,
    sync: &str,
    variant: Variant,
) -> (Connection, PathBuf) {
    fs::create_dir_all(&args.workdir).expect("create --workdir");
    let path = args.workdir.join(format!("{name}.db"));
    for suffix in ["", "-wal", "-shm"] {
        let _ = fs::remove_file(format!("{}{suffix}", path.display()));
    }
    fs::copy(template, &path).expect("copy the template");
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
fn growth(args: &Args, template: &Path, rows: &[Row], turn: usize, variant: Variant) -> Json {
    let name = format!("growth-{turn}-{}", variant.name());
    let (conn, _path) = fresh_db(args, template, &name, &args.sync, variant);
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
fn reads(args: &Args, template: &Path, rows: &[Row]) -> Json {
    let (conn, _path) = fresh_db(args, template, "reads", "OFF", Variant::SetBased);
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
fn scaling(args: &Args, template: &Path, rows: &[Row]) -> Json {
    let (conn, path) = fresh_db(args, template, "scaling", &args.sync, Variant::SetBased);
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
    let Some(args) = parse_args() else {
        return;
    };
    let template = match &args.template {
        Some(path) => path.clone(),
        None => own_template(&args),
    };
    let messages = match &args.messages {
        Some(path) => path.clone(),
        None => workload_messages(&args),
    };
    let rows = load_rows(&messages);
    let mut flushes = BTreeMap::new();
    if args.wants("growth") {
        for &turn in &args.turns {
            for variant in [Variant::Trigger, Variant::SetBased, Variant::NoFts] {
                flushes.insert(
                    format!("{turn}/{}", variant.name()),
                    growth(&args, &template, &rows, turn, variant),
                );
            }
        }
    }
    let doc = json!({
        "system": "floor",
        "sqlite_version": rusqlite::version(),
        "sync": args.sync,
        "flush": flushes,
        "reads": if args.wants("reads") { reads(&args, &template, &rows) } else { Json::Null },
        "scaling": if args.wants("scaling") && !args.scaling.is_empty() {
            scaling(&args, &template, &rows)
        } else {
            Json::Null
        },
        "fsync": if args.wants("fsync") { fsync(&args) } else { Json::Null },
    });
    match &args.out {
        Some(out) if out.as_os_str() == "-" => println!("{doc}"),
        Some(out) => fs::write(out, doc.to_string()).expect("write --out"),
        None => print_medians(&doc),
    }
    let _ = fs::remove_dir_all(&args.workdir);
}

/// Nearest-rank percentile `q` of samples already sorted (`benchlib/stats.py`'s rule).
fn ranked(ordered: &[u64], q: f64) -> u64 {
    let rank = (q * ordered.len() as f64).ceil() as usize;
    ordered[rank.clamp(1, ordered.len()) - 1]
}

/// Every sample list of the output (keys ending in `_ns`), by its path, as
/// p50 and p99: what `cargo bench` shows when nobody asked for the JSON.
fn print_medians(doc: &Json) {
    fn walk(path: &str, v: &Json, out: &mut Vec<(String, Vec<u64>)>) {
        match v {
            Json::Object(map) => {
                for (k, v) in map {
                    let here = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path} {k}")
                    };
                    walk(&here, v, out);
                }
            }
            Json::Array(items) if path.ends_with("_ns") => {
                let mut samples: Vec<u64> = items.iter().filter_map(Json::as_u64).collect();
                samples.sort_unstable();
                out.push((path.to_owned(), samples));
            }
            Json::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(&format!("{path} {i}"), v, out);
                }
            }
            _ => {}
        }
    }
    let mut lists = Vec::new();
    walk("", doc, &mut lists);
    println!(
        "floor (bare rusqlite, SQLite {}, synchronous={}):",
        rusqlite::version(),
        doc["sync"].as_str().unwrap_or("?")
    );
    for (path, samples) in lists.iter().filter(|(_, s)| !s.is_empty()) {
        let us = |ns: u64| ns as f64 / 1e3;
        println!(
            "  {path:<40} n {:>6}  p50 {:>10.1} µs  p99 {:>10.1} µs",
            samples.len(),
            us(ranked(samples, 0.50)),
            us(ranked(samples, 0.99))
        );
    }
}
