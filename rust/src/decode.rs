//! Owned rows → Python dicts, done after the SQL ran without the GIL.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use pyo3::{intern, IntoPyObjectExt};

use crate::model::{msg, Row, Value};
use crate::schema::CONTENT_JSON_PREFIX;

pub fn value<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    match v {
        Value::Null => Ok(py.None().into_bound(py)),
        Value::Integer(n) => n.into_bound_py_any(py),
        Value::Real(x) => x.into_bound_py_any(py),
        Value::Text(s) => s.into_bound_py_any(py),
        Value::Blob(b) => Ok(PyBytes::new(py, b).into_any()),
    }
}

/// A JSON document as Python objects. Malformed JSON comes back as the raw
/// string rather than failing the whole read.
pub fn json<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(doc) => json_value(py, &doc),
        Err(_) => text.into_bound_py_any(py),
    }
}

fn json_value<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use serde_json::Value as J;
    match v {
        J::Null => Ok(py.None().into_bound(py)),
        J::Bool(b) => b.into_bound_py_any(py),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_bound_py_any(py)
            } else if let Some(u) = n.as_u64() {
                u.into_bound_py_any(py)
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py)
            }
        }
        J::String(s) => s.into_bound_py_any(py),
        J::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_value(py, item)?)?;
            }
            Ok(list.into_any())
        }
        J::Object(map) => {
            let dict = PyDict::new(py);
            for (k, item) in map {
                dict.set_item(k, json_value(py, item)?)?;
            }
            Ok(dict.into_any())
        }
    }
}

/// `messages.content` back to what was stored: prefixed JSON becomes the
/// list (or dict) of parts again.
pub fn content<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    match v {
        Value::Text(s) => match s.strip_prefix(CONTENT_JSON_PREFIX) {
            Some(doc) => json(py, doc),
            None => s.into_bound_py_any(py),
        },
        other => value(py, other),
    }
}

/// Every column of a row, as stored.
pub fn row<'py>(py: Python<'py>, r: &Row) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, v) in r.columns.iter().zip(&r.values) {
        dict.set_item(name, value(py, v)?)?;
    }
    Ok(dict)
}

/// A `messages` row with its structured columns decoded.
pub fn message_row<'py>(py: Python<'py>, r: &Row) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, v) in r.columns.iter().zip(&r.values) {
        let decoded = match (name.as_str(), v) {
            ("content", _) => content(py, v)?,
            (
                "tool_calls"
                | "reasoning_details"
                | "codex_reasoning_items"
                | "codex_message_items",
                Value::Text(s),
            ) => json(py, s)?,
            _ => value(py, v)?,
        };
        dict.set_item(name, decoded)?;
    }
    Ok(dict)
}

fn text_at(r: &Row, index: usize) -> Option<&str> {
    match &r.values[index] {
        Value::Text(s) if !s.is_empty() => Some(s),
        _ => None,
    }
}

/// A `messages` row (read with [`crate::model::MESSAGE_COLUMNS`]) in the
/// OpenAI conversation shape the agent replays: `role`, `content`, and each
/// optional field only when it has a value.
pub fn conversation_message<'py>(py: Python<'py>, r: &Row) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let role = text_at(r, msg::ROLE).unwrap_or_default();
    dict.set_item(intern!(py, "role"), role)?;
    dict.set_item(
        intern!(py, "content"),
        content(py, &r.values[msg::CONTENT])?,
    )?;
    if let Some(s) = text_at(r, msg::API_CONTENT) {
        dict.set_item(intern!(py, "api_content"), s)?;
    }
    match r.values[msg::TIMESTAMP] {
        Value::Real(t) if t != 0.0 => dict.set_item(intern!(py, "timestamp"), t)?,
        Value::Integer(t) if t != 0 => dict.set_item(intern!(py, "timestamp"), t as f64)?,
        _ => {}
    }
    let optional = [
        (intern!(py, "tool_call_id"), msg::TOOL_CALL_ID),
        (intern!(py, "tool_name"), msg::TOOL_NAME),
        (intern!(py, "effect_disposition"), msg::EFFECT_DISPOSITION),
    ];
    for (key, index) in optional {
        if let Some(s) = text_at(r, index) {
            dict.set_item(key, s)?;
        }
    }
    if let Some(s) = text_at(r, msg::TOOL_CALLS) {
        dict.set_item(intern!(py, "tool_calls"), json(py, s)?)?;
    }
    if let Some(s) = text_at(r, msg::PLATFORM_MESSAGE_ID) {
        dict.set_item(intern!(py, "message_id"), s)?;
    }
    if matches!(r.values[msg::OBSERVED], Value::Integer(n) if n != 0) {
        dict.set_item(intern!(py, "observed"), true)?;
    }
    if role == "assistant" {
        for (key, index) in [
            (intern!(py, "finish_reason"), msg::FINISH_REASON),
            (intern!(py, "reasoning"), msg::REASONING),
        ] {
            if let Some(s) = text_at(r, index) {
                dict.set_item(key, s)?;
            }
        }
        if let Value::Text(s) = &r.values[msg::REASONING_CONTENT] {
            dict.set_item(intern!(py, "reasoning_content"), s)?;
        }
        for (key, index) in [
            (intern!(py, "reasoning_details"), msg::REASONING_DETAILS),
            (
                intern!(py, "codex_reasoning_items"),
                msg::CODEX_REASONING_ITEMS,
            ),
            (intern!(py, "codex_message_items"), msg::CODEX_MESSAGE_ITEMS),
        ] {
            if let Some(s) = text_at(r, index) {
                dict.set_item(key, json(py, s)?)?;
            }
        }
    }
    Ok(dict)
}
