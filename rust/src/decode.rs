//! Owned rows → Python dicts, done after the SQL ran without the GIL.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use pyo3::{intern, IntoPyObjectExt};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

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

/// A JSON document as Python objects, built straight from the parser (no
/// intermediate tree). Malformed JSON comes back as the raw string rather
/// than failing the whole read.
pub fn json<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let mut parser = serde_json::Deserializer::from_str(text);
    match PyJson(py)
        .deserialize(&mut parser)
        .and_then(|v| parser.end().map(|_| v))
    {
        Ok(v) => Ok(v),
        Err(_) => text.into_bound_py_any(py),
    }
}

/// Deserializes one JSON value into a Python object.
struct PyJson<'py>(Python<'py>);

fn py_err<E: de::Error>(e: PyErr) -> E {
    E::custom(e)
}

impl<'de, 'py> DeserializeSeed<'de> for PyJson<'py> {
    type Value = Bound<'py, PyAny>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 'py> Visitor<'de> for PyJson<'py> {
    type Value = Bound<'py, PyAny>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(self.0.None().into_bound(self.0))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        v.into_bound_py_any(self.0).map_err(py_err)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        v.into_bound_py_any(self.0).map_err(py_err)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        v.into_bound_py_any(self.0).map_err(py_err)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        v.into_bound_py_any(self.0).map_err(py_err)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(PyString::new(self.0, v).into_any())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let list = PyList::empty(self.0);
        while let Some(item) = seq.next_element_seed(PyJson(self.0))? {
            list.append(item).map_err(py_err)?;
        }
        Ok(list.into_any())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let dict = PyDict::new(self.0);
        while let Some(key) = map.next_key_seed(PyJson(self.0))? {
            let value = map.next_value_seed(PyJson(self.0))?;
            dict.set_item(key, value).map_err(py_err)?;
        }
        Ok(dict.into_any())
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
