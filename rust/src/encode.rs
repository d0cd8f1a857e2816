//! Python message dicts → owned rows, done while holding the GIL.
//!
//! Nothing is ever dropped: values JSON cannot hold are stored in a
//! documented, lossless-as-possible form and reported as warnings:
//!
//! | Python value              | stored as JSON                                    |
//! |---------------------------|---------------------------------------------------|
//! | tuple, set, frozenset     | array                                             |
//! | float NaN / ±inf          | the strings `"NaN"`, `"Infinity"`, `"-Infinity"`  |
//! | bytes / bytearray         | `{"__bytes_b64__": "<base64>"}`                   |
//! | datetime / date / time    | its `isoformat()` string                          |
//! | dict key not str/int/float/bool/None | `str(key)`                             |
//! | anything else             | `{"__repr__": repr(obj), "__type__": "module.Qualname"}` |
//!
//! Strings with lone surrogates (scraped web text) have them replaced by
//! U+FFFD instead of failing the write.

use std::io::Write as _;

use base64::Engine as _;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PySet, PyString,
    PyTuple,
};

use crate::model::CONTENT_JSON_PREFIX;
use crate::model::{NewMessage, Value};

/// Deeper nesting than this is stored as `repr` (it also stops cycles). It
/// stays below serde_json's read limit (128) so what we write reads back.
const MAX_DEPTH: usize = 100;

/// Collects what had to be stored in a substitute form.
#[derive(Default, Debug)]
pub struct Warnings(pub Vec<String>);

impl Warnings {
    fn note(&mut self, what: impl Into<String>) {
        // A handful says enough; a 10k-message flush must not log 10k lines.
        if self.0.len() < 20 {
            self.0.push(what.into());
        }
    }
}

/// Text of a Python string, each lone surrogate replaced by one U+FFFD.
pub fn text(s: &Bound<'_, PyString>, warnings: &mut Warnings) -> String {
    match s.to_str() {
        Ok(t) => t.to_owned(),
        Err(_) => {
            warnings.note("lone surrogates replaced by U+FFFD");
            utf16_lossy(s).unwrap_or_else(|_| s.to_string_lossy().into_owned())
        }
    }
}

/// Through UTF-16 (where a lone surrogate is one unit) rather than UTF-8
/// (where it is three bytes, and would become three replacement characters).
fn utf16_lossy(s: &Bound<'_, PyString>) -> PyResult<String> {
    let py = s.py();
    let encoded = s.call_method1(intern!(py, "encode"), ("utf-16-le", "surrogatepass"))?;
    let bytes = encoded.cast::<PyBytes>()?.as_bytes();
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
        .collect();
    Ok(String::from_utf16_lossy(&units))
}

/// Any value as text: strings as they are, everything else through `str()`.
fn any_text(v: &Bound<'_, PyAny>, warnings: &mut Warnings) -> PyResult<String> {
    match v.cast::<PyString>() {
        Ok(s) => Ok(text(s, warnings)),
        Err(_) => Ok(text(&v.str()?, warnings)),
    }
}

fn opt_text(v: Option<Bound<'_, PyAny>>, warnings: &mut Warnings) -> PyResult<Option<String>> {
    match v {
        Some(v) if !v.is_none() => any_text(&v, warnings).map(Some),
        _ => Ok(None),
    }
}

/// JSON for a truthy value, `None` for None / empty containers (as upstream).
fn opt_json(v: Option<Bound<'_, PyAny>>, warnings: &mut Warnings) -> PyResult<Option<String>> {
    match v {
        Some(v) if v.is_truthy()? => Ok(Some(to_json(&v, warnings)?)),
        _ => Ok(None),
    }
}

/// Serializes a Python value to compact JSON (see the module table for the
/// values JSON cannot hold).
pub fn to_json(v: &Bound<'_, PyAny>, warnings: &mut Warnings) -> PyResult<String> {
    let mut out = Vec::with_capacity(64);
    write_json(v, &mut out, warnings, 0)?;
    // Everything written is UTF-8: serde_json output and ASCII punctuation.
    Ok(String::from_utf8(out).expect("JSON output is UTF-8"))
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("writing to a Vec cannot fail");
}

fn write_json(
    v: &Bound<'_, PyAny>,
    out: &mut Vec<u8>,
    warnings: &mut Warnings,
    depth: usize,
) -> PyResult<()> {
    if depth > MAX_DEPTH {
        warnings.note("nesting deeper than 100 levels stored as repr");
        return write_repr(v, out, warnings);
    }
    if v.is_none() {
        out.extend_from_slice(b"null");
    } else if let Ok(s) = v.cast::<PyString>() {
        write_str(out, &text(s, warnings));
    } else if let Ok(b) = v.cast::<PyBool>() {
        out.extend_from_slice(if b.is_true() { b"true" } else { b"false" });
    } else if let Ok(i) = v.cast::<PyInt>() {
        if let Ok(n) = i.extract::<i64>() {
            write!(out, "{n}").expect("Vec write");
        } else {
            // Beyond 64 bits: the exact digits are still a valid JSON number.
            out.extend_from_slice(i.str()?.to_str()?.as_bytes());
        }
    } else if let Ok(f) = v.cast::<PyFloat>() {
        let x = f.value();
        if x.is_finite() {
            serde_json::to_writer(&mut *out, &x).expect("Vec write");
        } else {
            warnings.note("non-finite float stored as a string");
            let word = if x.is_nan() {
                "NaN"
            } else if x > 0.0 {
                "Infinity"
            } else {
                "-Infinity"
            };
            write_str(out, word);
        }
    } else if let Ok(d) = v.cast::<PyDict>() {
        out.push(b'{');
        for (n, (k, val)) in d.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            write_str(out, &dict_key(&k, warnings)?);
            out.push(b':');
            write_json(&val, out, warnings, depth + 1)?;
        }
        out.push(b'}');
    } else if let Ok(l) = v.cast::<PyList>() {
        write_array(l.iter(), out, warnings, depth)?;
    } else if let Ok(t) = v.cast::<PyTuple>() {
        write_array(t.iter(), out, warnings, depth)?;
    } else if let Ok(s) = v.cast::<PySet>() {
        warnings.note("set stored as an array");
        write_array(s.iter(), out, warnings, depth)?;
    } else if let Ok(s) = v.cast::<PyFrozenSet>() {
        warnings.note("frozenset stored as an array");
        write_array(s.iter(), out, warnings, depth)?;
    } else if let Some(bytes) = as_bytes(v) {
        warnings.note("bytes stored as {\"__bytes_b64__\": ...}");
        out.extend_from_slice(b"{\"__bytes_b64__\":");
        write_str(
            out,
            &base64::engine::general_purpose::STANDARD.encode(bytes),
        );
        out.push(b'}');
    } else if v.hasattr(intern!(v.py(), "isoformat"))? {
        warnings.note("date/time stored as its isoformat() string");
        let iso = v.call_method0(intern!(v.py(), "isoformat"))?;
        write_str(out, &any_text(&iso, warnings)?);
    } else {
        warnings.note(format!(
            "{} stored as {{\"__repr__\", \"__type__\"}}",
            type_name(v)
        ));
        write_repr(v, out, warnings)?;
    }
    Ok(())
}

fn write_array<'py>(
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    out: &mut Vec<u8>,
    warnings: &mut Warnings,
    depth: usize,
) -> PyResult<()> {
    out.push(b'[');
    for (n, item) in items.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        write_json(&item, out, warnings, depth + 1)?;
    }
    out.push(b']');
    Ok(())
}

fn write_repr(v: &Bound<'_, PyAny>, out: &mut Vec<u8>, warnings: &mut Warnings) -> PyResult<()> {
    out.extend_from_slice(b"{\"__repr__\":");
    let repr = match v.repr() {
        Ok(r) => text(&r, warnings),
        // A broken __repr__ must not cost the message.
        Err(_) => format!("<unprintable {} object>", type_name(v)),
    };
    write_str(out, &repr);
    out.extend_from_slice(b",\"__type__\":");
    write_str(out, &type_name(v));
    out.push(b'}');
    Ok(())
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    let ty = v.get_type();
    let module = ty.module().map(|m| m.to_string()).unwrap_or_default();
    let name = ty.qualname().map(|n| n.to_string()).unwrap_or_default();
    if module.is_empty() || module == "builtins" {
        name
    } else {
        format!("{module}.{name}")
    }
}

fn as_bytes(v: &Bound<'_, PyAny>) -> Option<Vec<u8>> {
    if let Ok(b) = v.cast::<PyBytes>() {
        Some(b.as_bytes().to_vec())
    } else if let Ok(b) = v.cast::<PyByteArray>() {
        Some(b.to_vec())
    } else {
        None
    }
}

/// Dict keys as Python's `json` module writes them.
fn dict_key(k: &Bound<'_, PyAny>, warnings: &mut Warnings) -> PyResult<String> {
    if let Ok(s) = k.cast::<PyString>() {
        return Ok(text(s, warnings));
    }
    if k.is_none() {
        return Ok("null".into());
    }
    if let Ok(b) = k.cast::<PyBool>() {
        return Ok(if b.is_true() { "true" } else { "false" }.into());
    }
    if k.cast::<PyInt>().is_err() && k.cast::<PyFloat>().is_err() {
        warnings.note("non-string dict key stored as str(key)");
    }
    any_text(k, warnings)
}

/// `messages.content`: scalars as they are, structured content as prefixed JSON.
fn content(v: Option<Bound<'_, PyAny>>, warnings: &mut Warnings) -> PyResult<Value> {
    let Some(v) = v else { return Ok(Value::Null) };
    if v.is_none() {
        Ok(Value::Null)
    } else if let Ok(s) = v.cast::<PyString>() {
        Ok(Value::Text(text(s, warnings)))
    } else if v.cast::<PyBool>().is_err() && v.cast::<PyInt>().is_ok() {
        match v.extract::<i64>() {
            Ok(n) => Ok(Value::Integer(n)),
            Err(_) => Ok(Value::Text(v.str()?.to_str()?.to_owned())),
        }
    } else if let Ok(f) = v.cast::<PyFloat>() {
        Ok(Value::Real(f.value()))
    } else {
        Ok(Value::Text(format!(
            "{CONTENT_JSON_PREFIX}{}",
            to_json(&v, warnings)?
        )))
    }
}

/// A timestamp from a float, an int or anything with `.timestamp()`.
fn timestamp(v: Option<Bound<'_, PyAny>>, now: f64, warnings: &mut Warnings) -> PyResult<f64> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(now);
    };
    if let Ok(x) = v.extract::<f64>() {
        if x.is_finite() {
            return Ok(x);
        }
    }
    if v.hasattr(intern!(v.py(), "timestamp"))? {
        if let Ok(x) = v
            .call_method0(intern!(v.py(), "timestamp"))?
            .extract::<f64>()
        {
            return Ok(x);
        }
    }
    warnings.note(format!(
        "unusable timestamp {} replaced by the current time",
        v.repr()?
    ));
    Ok(now)
}

fn tool_calls(
    v: Option<Bound<'_, PyAny>>,
    warnings: &mut Warnings,
) -> PyResult<(Option<String>, i64)> {
    match v {
        Some(v) if v.is_truthy()? => {
            let count = if let Ok(l) = v.cast::<PyList>() {
                l.len()
            } else if let Ok(t) = v.cast::<PyTuple>() {
                t.len()
            } else {
                1
            } as i64;
            Ok((Some(to_json(&v, warnings)?), count))
        }
        _ => Ok((None, 0)),
    }
}

/// Encodes one message dict. `now` stamps rows that carry no timestamp.
pub fn message<'py>(
    d: &Bound<'py, PyDict>,
    now: f64,
    warnings: &mut Warnings,
) -> PyResult<NewMessage> {
    let py = d.py();
    let get = |key: &Bound<'py, PyString>| d.get_item(key);
    let role = opt_text(get(intern!(py, "role"))?, warnings)?.unwrap_or_else(|| "unknown".into());
    let (tool_calls, tool_call_count) = tool_calls(get(intern!(py, "tool_calls"))?, warnings)?;
    let mut tool_name = opt_text(get(intern!(py, "tool_name"))?, warnings)?;
    if tool_name.is_none() && role == "tool" {
        // OpenAI-style tool results name their tool in "name".
        tool_name = opt_text(get(intern!(py, "name"))?, warnings)?;
    }
    let mut platform_message_id = opt_text(get(intern!(py, "platform_message_id"))?, warnings)?;
    if platform_message_id.is_none() {
        platform_message_id = opt_text(get(intern!(py, "message_id"))?, warnings)?;
    }
    let api_content = match get(intern!(py, "api_content"))? {
        Some(v) if !v.is_none() => Some(any_text(&v, warnings)?),
        _ => None,
    };
    let token_count = match get(intern!(py, "token_count"))? {
        Some(v) if !v.is_none() => {
            let count = v.extract::<i64>().ok();
            if count.is_none() {
                warnings.note(format!(
                    "token_count {} is not an integer; stored as NULL",
                    v.repr()?
                ));
            }
            count
        }
        _ => None,
    };
    Ok(NewMessage {
        content: content(get(intern!(py, "content"))?, warnings)?,
        tool_call_id: opt_text(get(intern!(py, "tool_call_id"))?, warnings)?,
        tool_calls,
        tool_call_count,
        tool_name,
        effect_disposition: opt_text(get(intern!(py, "effect_disposition"))?, warnings)?,
        timestamp: timestamp(get(intern!(py, "timestamp"))?, now, warnings)?,
        token_count,
        finish_reason: opt_text(get(intern!(py, "finish_reason"))?, warnings)?,
        reasoning: opt_text(get(intern!(py, "reasoning"))?, warnings)?,
        reasoning_content: opt_text(get(intern!(py, "reasoning_content"))?, warnings)?,
        reasoning_details: opt_json(get(intern!(py, "reasoning_details"))?, warnings)?,
        codex_reasoning_items: opt_json(get(intern!(py, "codex_reasoning_items"))?, warnings)?,
        codex_message_items: opt_json(get(intern!(py, "codex_message_items"))?, warnings)?,
        platform_message_id,
        observed: match get(intern!(py, "observed"))? {
            Some(v) => v.is_truthy()?,
            None => false,
        },
        api_content,
        role,
    })
}
