//! Owned rows → Python dicts, done after the SQL ran without the GIL.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use pyo3::{intern, IntoPyObjectExt};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::model::{conv, RowRef, ValueRef};
use crate::schema::CONTENT_JSON_PREFIX;

pub fn value<'py>(py: Python<'py>, v: ValueRef<'_>) -> PyResult<Bound<'py, PyAny>> {
    match v {
        ValueRef::Null => Ok(py.None().into_bound(py)),
        ValueRef::Integer(n) => n.into_bound_py_any(py),
        ValueRef::Real(x) => x.into_bound_py_any(py),
        ValueRef::Text(t) => Ok(text(py, t).into_any()),
        ValueRef::Blob(b) => Ok(PyBytes::new(py, b).into_any()),
    }
}

/// Stored text as a Python string. Python validates the UTF-8 as it
/// decodes (once), replacing what another writer may have stored invalid.
pub fn text<'py>(py: Python<'py>, bytes: &[u8]) -> Bound<'py, PyString> {
    // SAFETY: the GIL is held; the pointer and length describe `bytes`, and
    // "replace" makes decoding infallible but for memory exhaustion.
    unsafe {
        let obj = pyo3::ffi::PyUnicode_DecodeUTF8(
            bytes.as_ptr().cast(),
            bytes.len() as pyo3::ffi::Py_ssize_t,
            c"replace".as_ptr(),
        );
        match Bound::from_owned_ptr_or_err(py, obj) {
            Ok(s) => s.cast_into_unchecked(),
            Err(_) => PyString::new(py, &String::from_utf8_lossy(bytes)),
        }
    }
}

/// A JSON document as Python objects, built straight from the parser (no
/// intermediate tree). Malformed JSON comes back as the raw string rather
/// than failing the whole read.
pub fn json<'py>(py: Python<'py>, doc: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    let mut parser = serde_json::Deserializer::from_slice(doc);
    match PyJson(py)
        .deserialize(&mut parser)
        .and_then(|v| parser.end().map(|_| v))
    {
        Ok(v) => Ok(v),
        Err(_) => Ok(text(py, doc).into_any()),
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
        // A tool call's keys and its `type` value: interned, so allocated
        // and hashed once rather than per call.
        let py = self.0;
        let common = match v {
            "id" => intern!(py, "id"),
            "type" => intern!(py, "type"),
            "function" => intern!(py, "function"),
            "name" => intern!(py, "name"),
            "arguments" => intern!(py, "arguments"),
            _ => return Ok(PyString::new(py, v).into_any()),
        };
        Ok(common.clone().into_any())
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
pub fn content<'py>(py: Python<'py>, v: ValueRef<'_>) -> PyResult<Bound<'py, PyAny>> {
    if let ValueRef::Text(t) = v {
        if let Some(doc) = t.strip_prefix(CONTENT_JSON_PREFIX.as_bytes()) {
            return json(py, doc);
        }
    }
    value(py, v)
}

/// Every column of a row, as stored.
pub fn row<'py>(py: Python<'py>, r: RowRef<'_>) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, v) in r.columns().iter().zip(r.values()) {
        dict.set_item(name, value(py, v)?)?;
    }
    Ok(dict)
}

/// A `messages` row with its structured columns decoded.
pub fn message_row<'py>(py: Python<'py>, r: RowRef<'_>) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (name, v) in r.columns().iter().zip(r.values()) {
        let decoded = match (name.as_str(), v) {
            ("content", _) => content(py, v)?,
            (
                "tool_calls"
                | "reasoning_details"
                | "codex_reasoning_items"
                | "codex_message_items",
                ValueRef::Text(t),
            ) => json(py, t)?,
            _ => value(py, v)?,
        };
        dict.set_item(name, decoded)?;
    }
    Ok(dict)
}

/// A `messages` row (read with [`crate::model::CONVERSATION_COLUMNS`]) in the
/// OpenAI conversation shape the agent replays: `role`, `content`, and each
/// optional field only when it has a value.
pub fn conversation_message<'py>(py: Python<'py>, r: RowRef<'_>) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let role = r.text(conv::ROLE).unwrap_or_default();
    dict.set_item(intern!(py, "role"), role_string(py, role))?;
    dict.set_item(intern!(py, "content"), content(py, r.get(conv::CONTENT))?)?;
    if let Some(s) = r.text(conv::API_CONTENT) {
        dict.set_item(intern!(py, "api_content"), text(py, s))?;
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
            dict.set_item(key, text(py, s))?;
        }
    }
    if let Some(s) = r.text(conv::TOOL_CALLS) {
        dict.set_item(intern!(py, "tool_calls"), json(py, s)?)?;
    }
    if let Some(s) = r.text(conv::PLATFORM_MESSAGE_ID) {
        dict.set_item(intern!(py, "message_id"), text(py, s))?;
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
                dict.set_item(key, text(py, s))?;
            }
        }
        if let ValueRef::Text(t) = r.get(conv::REASONING_CONTENT) {
            dict.set_item(intern!(py, "reasoning_content"), text(py, t))?;
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
                dict.set_item(key, json(py, s)?)?;
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
