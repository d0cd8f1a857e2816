//! Owned rows → Python dicts, done after the SQL ran without the GIL.

use std::ffi::CStr;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use pyo3::{intern, IntoPyObjectExt};

use crate::model::CONTENT_JSON_PREFIX;
use crate::model::{all_ascii, conv, RowRef, Text, ValueRef};
use crate::pyjson::{self, Malformed};

pub fn value<'py>(py: Python<'py>, v: ValueRef<'_>) -> PyResult<Bound<'py, PyAny>> {
    match v {
        ValueRef::Null => Ok(py.None().into_bound(py)),
        ValueRef::Integer(n) => n.into_bound_py_any(py),
        ValueRef::Real(x) => x.into_bound_py_any(py),
        ValueRef::Text(t) => Ok(text(py, t).into_any()),
        ValueRef::Blob(b) => Ok(PyBytes::new(py, b).into_any()),
    }
}

/// Stored text as a Python string, replacing what another writer may have
/// stored as invalid UTF-8.
pub fn text<'py>(py: Python<'py>, bytes: &[u8]) -> Bound<'py, PyString> {
    // "replace" makes decoding infallible but for memory exhaustion.
    utf8(py, bytes, c"replace")
        .unwrap_or_else(|_| PyString::new(py, &String::from_utf8_lossy(bytes)))
}

/// UTF-8 as a Python string: ASCII is copied in as it is, anything else is
/// validated once, by Python, as it decodes; `errors` is a Python error
/// handler ("strict", "replace").
pub fn utf8<'py>(py: Python<'py>, bytes: &[u8], errors: &CStr) -> PyResult<Bound<'py, PyString>> {
    if all_ascii(bytes) {
        return ascii(py, bytes);
    }
    // SAFETY: the GIL is held; the pointer and length describe `bytes`.
    unsafe {
        let obj = pyo3::ffi::PyUnicode_DecodeUTF8(
            bytes.as_ptr().cast(),
            bytes.len() as pyo3::ffi::Py_ssize_t,
            errors.as_ptr(),
        );
        Bound::from_owned_ptr_or_err(py, obj).map(|s| s.cast_into_unchecked())
    }
}

/// ASCII as a Python string, copied straight into a new one: the UTF-8
/// decoder scans and copies it word by word (~7% of a transcript load).
pub fn ascii<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyString>> {
    debug_assert!(bytes.is_ascii());
    // SAFETY: the GIL is held. `PyUnicode_New(n, 127)` returns a compact
    // ASCII string with room for `n` bytes, which are filled here before
    // the string is used.
    unsafe {
        let obj = pyo3::ffi::PyUnicode_New(bytes.len() as pyo3::ffi::Py_ssize_t, 127);
        let string = Bound::from_owned_ptr_or_err(py, obj)?;
        let data = pyo3::ffi::PyUnicode_DATA(string.as_ptr()).cast::<u8>();
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), data, bytes.len());
        Ok(string.cast_into_unchecked())
    }
}

/// A JSON document as Python objects. Malformed JSON comes back as the raw
/// string rather than failing the whole read.
pub fn json<'py>(py: Python<'py>, doc: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    match pyjson::parse(py, doc) {
        Ok(v) => Ok(v),
        Err(Malformed) => Ok(text(py, doc).into_any()),
    }
}

/// Text read from a [`crate::model::Table`], which knows if it is ASCII.
fn stored_text<'py>(py: Python<'py>, t: Text<'_>) -> Bound<'py, PyString> {
    if t.ascii {
        if let Ok(s) = ascii(py, t.bytes) {
            return s;
        }
    }
    text(py, t.bytes)
}

/// Column `index` of `r` as stored.
fn cell<'py>(py: Python<'py>, r: RowRef<'_>, index: usize) -> PyResult<Bound<'py, PyAny>> {
    match r.text(index) {
        Some(t) => Ok(stored_text(py, t).into_any()),
        None => value(py, r.get(index)),
    }
}

/// `messages.content` (column `index` of `r`) back to what was stored:
/// prefixed JSON becomes the list (or dict) of parts again.
fn content<'py>(py: Python<'py>, r: RowRef<'_>, index: usize) -> PyResult<Bound<'py, PyAny>> {
    let parts = r
        .text(index)
        .and_then(|t| t.bytes.strip_prefix(CONTENT_JSON_PREFIX.as_bytes()));
    match parts {
        Some(doc) => json(py, doc),
        None => cell(py, r, index),
    }
}

/// The dict keys of a table's rows, made once for all of them (interned: a
/// page of rows shares each key instead of building it per row), and a dict
/// of those keys, each None, that every row's dict starts as a copy of:
/// copying a key table is cheaper than inserting each key into a dict that
/// grows as it fills, and a NULL cell then costs nothing.
pub struct RowKeys<'py> {
    keys: Vec<Bound<'py, PyString>>,
    blank: Bound<'py, PyDict>,
}

impl<'py> RowKeys<'py> {
    pub fn new(py: Python<'py>, columns: &[String]) -> PyResult<Self> {
        let keys: Vec<_> = columns.iter().map(|c| PyString::intern(py, c)).collect();
        let blank = PyDict::new(py);
        for key in &keys {
            blank.set_item(key, py.None())?;
        }
        Ok(RowKeys { keys, blank })
    }

    /// A new dict of every key, each None.
    fn blank(&self) -> PyResult<Bound<'py, PyDict>> {
        self.blank.copy()
    }
}

/// Every column of a row, as stored.
pub fn row<'py>(
    py: Python<'py>,
    r: RowRef<'_>,
    keys: &RowKeys<'py>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = keys.blank()?;
    for (index, key) in keys.keys.iter().enumerate() {
        if !r.is_null(index) {
            dict.set_item(key, cell(py, r, index)?)?;
        }
    }
    Ok(dict)
}

/// A `messages` row with its structured columns decoded.
pub fn message_row<'py>(
    py: Python<'py>,
    r: RowRef<'_>,
    keys: &RowKeys<'py>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = keys.blank()?;
    for (index, (name, key)) in r.columns().iter().zip(&keys.keys).enumerate() {
        if r.is_null(index) {
            continue;
        }
        let decoded = match (name.as_str(), r.text(index)) {
            ("content" | "before_content" | "after_content", _) => content(py, r, index)?,
            (
                "tool_calls"
                | "reasoning_details"
                | "codex_reasoning_items"
                | "codex_message_items",
                Some(t),
            ) => json(py, t.bytes)?,
            _ => cell(py, r, index)?,
        };
        dict.set_item(key, decoded)?;
    }
    Ok(dict)
}

/// Whether a conversation row is a user or assistant message whose text
/// names hermes-agent's recalled-memory fence (`memory-context`, in any
/// case), so it may hold memory that leaked into the transcript. Cheap on
/// every row of a load; the caller mends the few that do.
pub fn may_hold_leaked_memory(r: RowRef<'_>) -> bool {
    let role = r.text(conv::ROLE).map_or(&b""[..], |t| t.bytes);
    if role != b"user" && role != b"assistant" {
        return false;
    }
    r.text(conv::CONTENT).is_some_and(|t| {
        !t.bytes.starts_with(CONTENT_JSON_PREFIX.as_bytes()) && names_memory_fence(t.bytes)
    })
}

/// `memory-context` in `text`, ASCII case ignored: Python's case-blind
/// match of these letters admits no other character, so this finds every
/// text its pattern does. Looks only around hyphens (found by `memchr`).
fn names_memory_fence(text: &[u8]) -> bool {
    memchr::memchr_iter(b'-', text).any(|at| {
        at >= 6
            && text[at - 6..at].eq_ignore_ascii_case(b"memory")
            && text
                .get(at + 1..at + 8)
                .is_some_and(|after| after.eq_ignore_ascii_case(b"context"))
    })
}

/// A `messages` row (read with [`crate::model::CONVERSATION_COLUMNS`]) in the
/// OpenAI conversation shape the agent replays: `role`, `content`, and each
/// optional field only when it has a value.
pub fn conversation_message<'py>(py: Python<'py>, r: RowRef<'_>) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let role = r.text(conv::ROLE).map_or(&b""[..], |t| t.bytes);
    dict.set_item(intern!(py, "role"), role_string(py, role))?;
    dict.set_item(intern!(py, "content"), content(py, r, conv::CONTENT)?)?;
    if let Some(s) = r.text(conv::API_CONTENT) {
        dict.set_item(intern!(py, "api_content"), stored_text(py, s))?;
    }
    match r.get(conv::TIMESTAMP) {
        ValueRef::Real(t) if t != 0.0 => dict.set_item(intern!(py, "timestamp"), t)?,
        ValueRef::Integer(t) if t != 0 => dict.set_item(intern!(py, "timestamp"), t as f64)?,
        _ => {}
    }
    let optional = [
        (intern!(py, "tool_call_id"), conv::TOOL_CALL_ID),
        (intern!(py, "tool_name"), conv::TOOL_NAME),
        (intern!(py, "effect_disposition"), conv::EFFECT_DISPOSITION),
    ];
    for (key, index) in optional {
        if let Some(s) = r.text(index) {
            dict.set_item(key, stored_text(py, s))?;
        }
    }
    if let Some(s) = r.text(conv::TOOL_CALLS) {
        dict.set_item(intern!(py, "tool_calls"), json(py, s.bytes)?)?;
    }
    if let Some(s) = r.text(conv::PLATFORM_MESSAGE_ID) {
        dict.set_item(intern!(py, "message_id"), stored_text(py, s))?;
    }
    if matches!(r.get(conv::OBSERVED), ValueRef::Integer(n) if n != 0) {
        dict.set_item(intern!(py, "observed"), true)?;
    }
    if role == b"assistant" {
        for (key, index) in [
            (intern!(py, "finish_reason"), conv::FINISH_REASON),
            (intern!(py, "reasoning"), conv::REASONING),
        ] {
            if let Some(s) = r.text(index) {
                dict.set_item(key, stored_text(py, s))?;
            }
        }
        // Kept even when empty, as hermes-agent replays it.
        if matches!(r.get(conv::REASONING_CONTENT), ValueRef::Text(_)) {
            let reasoning = cell(py, r, conv::REASONING_CONTENT)?;
            dict.set_item(intern!(py, "reasoning_content"), reasoning)?;
        }
        for (key, index) in [
            (intern!(py, "reasoning_details"), conv::REASONING_DETAILS),
            (
                intern!(py, "codex_reasoning_items"),
                conv::CODEX_REASONING_ITEMS,
            ),
            (
                intern!(py, "codex_message_items"),
                conv::CODEX_MESSAGE_ITEMS,
            ),
        ] {
            if let Some(s) = r.text(index) {
                dict.set_item(key, json(py, s.bytes)?)?;
            }
        }
    }
    Ok(dict)
}

/// The common roles as interned strings: one object each, however long the transcript.
fn role_string<'py>(py: Python<'py>, role: &[u8]) -> Bound<'py, PyString> {
    match role {
        b"user" => intern!(py, "user").clone(),
        b"assistant" => intern!(py, "assistant").clone(),
        b"tool" => intern!(py, "tool").clone(),
        b"system" => intern!(py, "system").clone(),
        other => text(py, other),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_memory_fence_is_found_in_any_case_and_only_whole() {
        for text in ["<memory-context>", "x MeMoRy-CONTEXT y", "a-memory-context"] {
            assert!(super::names_memory_fence(text.as_bytes()), "{text}");
        }
        for text in [
            "memory context",
            "memory-contex",
            "emory-context",
            "-context",
            "memory-",
            "",
        ] {
            assert!(!super::names_memory_fence(text.as_bytes()), "{text}");
        }
    }

    use super::*;

    #[test]
    fn stored_text_decodes_as_python_decodes_it() {
        Python::initialize();
        Python::attach(|py| {
            let samples: [&[u8]; 6] = [
                b"",
                b"plain ascii",
                b"a nul \0 inside",
                "caf\u{e9}".as_bytes(),
                "\u{5317}\u{4eac} \u{1f680}".as_bytes(),
                b"invalid \xff byte",
            ];
            for bytes in samples {
                let ours = text(py, bytes);
                let python = PyBytes::new(py, bytes)
                    .call_method1("decode", ("utf-8", "replace"))
                    .unwrap();
                assert!(ours.as_any().eq(&python).unwrap(), "{bytes:?}");
                // Strings of different kinds never compare equal; the ASCII
                // flag is not compared, but `isascii` reads it.
                let ascii = |s: &Bound<'_, PyAny>| -> bool {
                    s.call_method0("isascii").unwrap().extract().unwrap()
                };
                assert_eq!(ascii(ours.as_any()), ascii(&python), "{bytes:?}");
            }
        });
    }
}
