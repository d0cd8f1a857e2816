//! The project's own data: values, rows to write, tables read back, and the
//! row format every backend stores (column lists, the JSON content prefix).
//!
//! Everything here is plain Rust data, free of any database library's types,
//! so the GIL can be released while it is written or read and every backend
//! speaks the same values.

use std::sync::Arc;

/// The version of hermes-agent's data model our rows follow (its
/// `schema_version`, 22 in hermes-agent 0.19.0).
pub const SCHEMA_VERSION: i64 = 22;

/// Prefix marking `messages.content` values that hold JSON (a list of parts),
/// shared with hermes-agent so each decodes the other's multimodal content.
pub const CONTENT_JSON_PREFIX: &str = "\u{0}json:";

/// One stored value, owned.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// One stored value, borrowed from a row or a [`Value`]. Text is raw bytes:
/// UTF-8 unless another writer stored something else.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    Null,
    Integer(i64),
    Real(f64),
    Text(&'a [u8]),
    Blob(&'a [u8]),
}

impl Value {
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Integer(n) => ValueRef::Integer(*n),
            Value::Real(x) => ValueRef::Real(*x),
            Value::Text(t) => ValueRef::Text(t.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }
    }
}

impl From<&str> for Value {
    fn from(text: &str) -> Self {
        Value::Text(text.to_owned())
    }
}

impl From<String> for Value {
    fn from(text: String) -> Self {
        Value::Text(text)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Integer(n)
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Self {
        Value::Real(x)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(value: Option<T>) -> Self {
        value.map_or(Value::Null, Into::into)
    }
}

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

/// One cell of a [`Table`]: scalars inline, text and blobs as ranges of the
/// table's byte arena. Text notes whether it is ASCII, found out by the
/// thread that reads the rows rather than the one converting them.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cell {
    Null,
    Integer(i64),
    Real(f64),
    Text { start: u32, len: u32, ascii: bool },
    Blob(u32, u32),
}

/// Stored text and whether it is all ASCII.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Text<'a> {
    pub bytes: &'a [u8],
    pub ascii: bool,
}

/// Whether `bytes` are all ASCII: an OR of every byte, which vectorizes
/// (`is_ascii` goes a word at a time).
pub fn all_ascii(bytes: &[u8]) -> bool {
    bytes.iter().fold(0u8, |seen, &b| seen | b) < 0x80
}

/// The rows of one query, read without the GIL.
///
/// Flat on purpose: a 10,000-message transcript is two growing buffers
/// (cells, bytes) instead of 200,000 small allocations, which made up a
/// third of a load's time.
#[derive(Debug, Default)]
pub struct Table {
    /// Shared by the tables of one result, which a long read hands over in parts.
    pub columns: Arc<[String]>,
    cells: Vec<Cell>,
    bytes: Vec<u8>,
}

thread_local! {
    /// The buffers of this thread's last table, kept for its next one: a
    /// long transcript's buffers are megabytes, and fresh ones cost page
    /// faults and zeroing on every load.
    static SPARE: std::cell::RefCell<(Vec<Cell>, Vec<u8>)> = const {
        std::cell::RefCell::new((Vec::new(), Vec::new()))
    };
}

/// Buffers above this size are returned to the allocator rather than kept.
const SPARE_LIMIT: usize = 64 << 20;

impl Table {
    pub fn new(columns: Arc<[String]>) -> Self {
        let (cells, bytes) = SPARE.with(|spare| std::mem::take(&mut *spare.borrow_mut()));
        Table {
            columns,
            cells,
            bytes,
        }
    }

    /// Appends one cell; a row is complete after `columns.len()` of them.
    pub fn push(&mut self, value: ValueRef<'_>) {
        let cell = match value {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(n) => Cell::Integer(n),
            ValueRef::Real(x) => Cell::Real(x),
            ValueRef::Text(t) => {
                let (start, len) = self.store(t);
                Cell::Text {
                    start,
                    len,
                    ascii: all_ascii(t),
                }
            }
            ValueRef::Blob(b) => {
                let (start, len) = self.store(b);
                Cell::Blob(start, len)
            }
        };
        self.cells.push(cell);
    }

    fn store(&mut self, data: &[u8]) -> (u32, u32) {
        let start = self.bytes.len() as u32;
        self.bytes.extend_from_slice(data);
        (start, data.len() as u32)
    }

    /// An empty table with the same columns and room for as much data.
    pub fn sized_like(&self) -> Self {
        Table {
            columns: Arc::clone(&self.columns),
            cells: Vec::with_capacity(self.cells.len()),
            bytes: Vec::with_capacity(self.bytes.len() + self.bytes.len() / 4),
        }
    }

    /// Asks the CPU to bring the table's memory into this core's cache: a
    /// table read on another core is otherwise fetched a line at a time, as
    /// its rows are converted.
    pub fn prefetch(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let cells = self.cells.as_ptr().cast::<i8>();
            let cells_len = std::mem::size_of_val(&self.cells[..]);
            for (base, len) in [
                (cells, cells_len),
                (self.bytes.as_ptr().cast::<i8>(), self.bytes.len()),
            ] {
                for offset in (0..len).step_by(64) {
                    // SAFETY: a prefetch is only a hint; the address is inside the buffer.
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(base.add(offset)) };
                }
            }
        }
    }

    pub fn row_count(&self) -> usize {
        self.cells.len() / self.columns.len().max(1)
    }

    pub fn rows(&self) -> impl Iterator<Item = RowRef<'_>> {
        let width = self.columns.len().max(1);
        self.cells
            .chunks_exact(width)
            .map(move |cells| RowRef { table: self, cells })
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        let (mut cells, mut bytes) = (
            std::mem::take(&mut self.cells),
            std::mem::take(&mut self.bytes),
        );
        if bytes.capacity() <= SPARE_LIMIT && cells.capacity() * size_of::<Cell>() <= SPARE_LIMIT {
            cells.clear();
            bytes.clear();
            SPARE.with(|spare| *spare.borrow_mut() = (cells, bytes));
        }
    }
}

/// One row of a [`Table`].
#[derive(Clone, Copy)]
pub struct RowRef<'a> {
    table: &'a Table,
    cells: &'a [Cell],
}

impl<'a> RowRef<'a> {
    pub fn columns(&self) -> &'a [String] {
        &self.table.columns
    }

    fn bytes(&self, start: u32, len: u32) -> &'a [u8] {
        &self.table.bytes[start as usize..(start + len) as usize]
    }

    pub fn get(&self, index: usize) -> ValueRef<'a> {
        match self.cells[index] {
            Cell::Null => ValueRef::Null,
            Cell::Integer(n) => ValueRef::Integer(n),
            Cell::Real(x) => ValueRef::Real(x),
            Cell::Text { start, len, .. } => ValueRef::Text(self.bytes(start, len)),
            Cell::Blob(start, len) => ValueRef::Blob(self.bytes(start, len)),
        }
    }

    pub fn is_null(&self, index: usize) -> bool {
        matches!(self.cells[index], Cell::Null)
    }

    /// Non-empty text at `index`, as stored (UTF-8 unless a writer lied).
    pub fn text(&self, index: usize) -> Option<Text<'a>> {
        match self.cells[index] {
            Cell::Text { start, len, ascii } if len > 0 => Some(Text {
                bytes: self.bytes(start, len),
                ascii,
            }),
            _ => None,
        }
    }
}

/// Seconds since the Unix epoch, as SQLite `REAL` timestamps are stored.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The columns of a message read, in this order.
pub const MESSAGE_COLUMNS: &str = "id, session_id, role, content, tool_call_id, tool_calls, \
    tool_name, effect_disposition, timestamp, token_count, finish_reason, reasoning, \
    reasoning_content, reasoning_details, codex_reasoning_items, codex_message_items, \
    platform_message_id, observed, active, compacted, api_content";

/// The columns the conversation shape uses, in this order (see [`conv`]
/// for indices): a long transcript's load copies no cell it drops.
pub const CONVERSATION_COLUMNS: &str = "role, content, tool_call_id, tool_calls, tool_name, \
    effect_disposition, timestamp, finish_reason, reasoning, reasoning_content, \
    reasoning_details, codex_reasoning_items, codex_message_items, platform_message_id, \
    observed, api_content";

/// Positions of [`CONVERSATION_COLUMNS`] in a conversation [`RowRef`].
pub mod conv {
    pub const ROLE: usize = 0;
    pub const CONTENT: usize = 1;
    pub const TOOL_CALL_ID: usize = 2;
    pub const TOOL_CALLS: usize = 3;
    pub const TOOL_NAME: usize = 4;
    pub const EFFECT_DISPOSITION: usize = 5;
    pub const TIMESTAMP: usize = 6;
    pub const FINISH_REASON: usize = 7;
    pub const REASONING: usize = 8;
    pub const REASONING_CONTENT: usize = 9;
    pub const REASONING_DETAILS: usize = 10;
    pub const CODEX_REASONING_ITEMS: usize = 11;
    pub const CODEX_MESSAGE_ITEMS: usize = 12;
    pub const PLATFORM_MESSAGE_ID: usize = 13;
    pub const OBSERVED: usize = 14;
    pub const API_CONTENT: usize = 15;
}
