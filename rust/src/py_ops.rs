//! Python values as typed store operations: filter tuples, column values,
//! and the op classes `Select`, `Insert`, `Update`, `Delete` and `Append`
//! that `Store.query` and `Store.write` take. Everything is checked as it
//! is built (with the GIL held), names against the open store when it runs.
//!
//! A filter is a tuple:
//! `("=", column, value)` (also `!=`, `<`, `<=`, `>`, `>=`),
//! `("in", column, [values])`, `("in", column, Select(...))`,
//! `("is null", column)`, `("is not null", column)`,
//! `("like", column, pattern)`, `("glob", column, pattern)`,
//! `("and", [filters])`, `("or", [filters])`, `("not", filter)`.
//! A column name may also name a derived value of the relation (`preview`,
//! `last_active` of sessions); in a query's columns, `"*"` is every column.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::encode::{self, Warnings};
use crate::model::Value;
use crate::store::{
    self, Assign, Cmp, Filter, NoMatch, OnConflict, Order, Query, Relation, Term, WriteOp,
};

/// A relation by name; an unknown name lists the known ones.
pub fn relation(name: &str) -> PyResult<Relation> {
    Ok(Relation::parse(name)?)
}

/// A column value to write: scalars as they are, structures as JSON.
pub fn column_value(v: &Bound<'_, PyAny>, warnings: &mut Warnings) -> PyResult<Value> {
    if v.is_none() {
        Ok(Value::Null)
    } else if let Ok(s) = v.cast::<PyString>() {
        Ok(Value::Text(encode::text(s, warnings)))
    } else if let Ok(b) = v.extract::<bool>() {
        Ok(Value::Integer(b as i64))
    } else if let Ok(n) = v.extract::<i64>() {
        Ok(Value::Integer(n))
    } else if let Ok(x) = v.extract::<f64>() {
        Ok(Value::Real(x))
    } else {
        Ok(Value::Text(encode::to_json(v, warnings)?))
    }
}

/// Named column values, in the mapping's order.
pub fn column_values(mapping: &Bound<'_, PyAny>) -> PyResult<Vec<(String, Value)>> {
    let mut warnings = Warnings::default();
    mapping
        .call_method0("items")?
        .try_iter()?
        .map(|item| {
            let (name, value): (String, Bound<'_, PyAny>) = item?.extract()?;
            Ok((name, column_value(&value, &mut warnings)?))
        })
        .collect()
}

/// A value to compare with: a str, int, float, bool, bytes or None.
pub fn scalar(v: &Bound<'_, PyAny>) -> PyResult<Value> {
    if v.is_none() {
        Ok(Value::Null)
    } else if let Ok(s) = v.cast::<PyString>() {
        Ok(Value::Text(s.to_str()?.to_owned()))
    } else if let Ok(b) = v.cast::<PyBool>() {
        Ok(Value::Integer(b.is_true() as i64))
    } else if v.cast::<PyInt>().is_ok() {
        Ok(Value::Integer(v.extract()?))
    } else if let Ok(x) = v.cast::<PyFloat>() {
        Ok(Value::Real(x.value()))
    } else if let Ok(b) = v.cast::<PyBytes>() {
        Ok(Value::Blob(b.as_bytes().to_vec()))
    } else {
        Err(PyTypeError::new_err(format!(
            "a filter compares with a str, int, float, bool, bytes or None, not {}",
            v.repr()?
        )))
    }
}

fn term(relation: Relation, name: &Bound<'_, PyAny>) -> PyResult<Term> {
    let name: &str = name.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "a column name is a str, not {}",
            name.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })?;
    Ok(Term::named(relation, name))
}

/// `names` as what a query selects; `"*"` stands for every column of the
/// relation (`all`), in the store's order.
pub fn terms(relation: Relation, names: &[String], all: &[String]) -> Vec<Term> {
    names
        .iter()
        .flat_map(|name| match name.as_str() {
            "*" => all.iter().map(|c| Term::Column(c.clone())).collect(),
            name => vec![Term::named(relation, name)],
        })
        .collect()
}

/// `names` as an ordering: `"-name"` is descending.
pub fn order(relation: Relation, names: &[String]) -> Vec<Order> {
    names
        .iter()
        .map(|name| {
            let (name, descending) = match name.strip_prefix('-') {
                Some(name) => (name, true),
                None => (name.as_str(), false),
            };
            Order {
                term: Term::named(relation, name),
                descending,
            }
        })
        .collect()
}

/// A filter tuple (see the module doc); None: every row.
pub fn filter(relation: Relation, f: Option<&Bound<'_, PyAny>>) -> PyResult<Filter> {
    let Some(f) = f.filter(|f| !f.is_none()) else {
        return Ok(Filter::All);
    };
    let bad = || -> PyErr {
        PyValueError::new_err(format!(
            "{} is not a filter: use (\"=\", column, value) (or !=, <, <=, >, >=), \
             (\"in\", column, [values] or Select(...)), (\"is null\", column), \
             (\"is not null\", column), (\"like\", column, pattern), (\"glob\", column, pattern), \
             (\"and\", [filters]), (\"or\", [filters]) or (\"not\", filter)",
            f.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    };
    let t = f.cast::<PyTuple>().map_err(|_| bad())?;
    let Ok(op) = t.get_item(0).and_then(|op| op.extract::<String>()) else {
        return Err(bad());
    };
    let arg = |i: usize| t.get_item(i);
    let cmp = match op.as_str() {
        "=" => Some(Cmp::Eq),
        "!=" => Some(Cmp::Ne),
        "<" => Some(Cmp::Lt),
        "<=" => Some(Cmp::Le),
        ">" => Some(Cmp::Gt),
        ">=" => Some(Cmp::Ge),
        _ => None,
    };
    Ok(match (op.as_str(), t.len()) {
        (_, 3) if cmp.is_some() => Filter::Compare(
            term(relation, &arg(1)?)?,
            cmp.expect("matched"),
            scalar(&arg(2)?)?,
        ),
        ("in", 3) => {
            let values = arg(2)?;
            match values.cast::<Select>() {
                Ok(select) => Filter::InQuery(
                    term(relation, &arg(1)?)?,
                    Box::new(select.get().query.clone()),
                ),
                Err(_) => Filter::In(
                    term(relation, &arg(1)?)?,
                    values
                        .try_iter()?
                        .map(|v| scalar(&v?))
                        .collect::<PyResult<_>>()?,
                ),
            }
        }
        ("is null", 2) => Filter::IsNull(term(relation, &arg(1)?)?),
        ("is not null", 2) => Filter::Not(Box::new(Filter::IsNull(term(relation, &arg(1)?)?))),
        ("like", 3) => Filter::Like(term(relation, &arg(1)?)?, arg(2)?.extract()?),
        ("glob", 3) => Filter::Glob(term(relation, &arg(1)?)?, arg(2)?.extract()?),
        ("and" | "or", 2) => {
            let all = arg(1)?
                .try_iter()?
                .map(|inner| filter(relation, Some(&inner?)))
                .collect::<PyResult<Vec<_>>>()?;
            if op == "and" {
                Filter::And(all)
            } else {
                Filter::Or(all)
            }
        }
        ("not", 2) => Filter::Not(Box::new(filter(relation, Some(&arg(1)?))?)),
        _ => return Err(bad()),
    })
}

/// One column of the rows of a relation, for `("in", column, Select(...))`.
#[pyclass(frozen, module = "hermes._core")]
pub struct Select {
    query: Query,
}

#[pymethods]
impl Select {
    #[new]
    #[pyo3(signature = (relation, column, r#where = None))]
    fn new(relation: &str, column: &str, r#where: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let relation = self::relation(relation)?;
        let mut query = Query::all(relation);
        query.select = vec![Term::named(relation, column)];
        query.filter = filter(relation, r#where)?;
        Ok(Select { query })
    }
}

/// One row of named columns (`on_conflict`: what a row with the same key
/// gets: "fail", "ignore", "replace" its given columns, or "fill_nulls").
#[pyclass(frozen, module = "hermes._core")]
pub struct Insert {
    op: WriteOp,
}

#[pymethods]
impl Insert {
    #[new]
    #[pyo3(signature = (relation, values, *, on_conflict = "fail"))]
    fn new(relation: &str, values: &Bound<'_, PyAny>, on_conflict: &str) -> PyResult<Self> {
        let on_conflict = match on_conflict {
            "fail" => OnConflict::Fail,
            "ignore" => OnConflict::Ignore,
            "replace" => OnConflict::Replace,
            "fill_nulls" => OnConflict::FillNulls,
            other => {
                return Err(PyValueError::new_err(format!(
                    "on_conflict={other:?}: use \"fail\", \"ignore\", \"replace\" or \"fill_nulls\""
                )))
            }
        };
        Ok(Insert {
            op: WriteOp::Insert(store::Insert {
                relation: self::relation(relation)?,
                values: column_values(values)?,
                on_conflict,
            }),
        })
    }
}

/// Sets columns (`set`), adds to numeric columns (`add`) and fills the NULL
/// ones of `fill_nulls` of the rows `where` matches; with `must_match`,
/// matching none fails the write.
#[pyclass(frozen, module = "hermes._core")]
pub struct Update {
    op: WriteOp,
}

#[pymethods]
impl Update {
    #[new]
    #[pyo3(signature = (
        relation, r#where, set = None, *, add = None, fill_nulls = None, must_match = false
    ))]
    fn new(
        relation: &str,
        r#where: &Bound<'_, PyAny>,
        set: Option<&Bound<'_, PyAny>>,
        add: Option<&Bound<'_, PyAny>>,
        fill_nulls: Option<&Bound<'_, PyAny>>,
        must_match: bool,
    ) -> PyResult<Self> {
        let relation = self::relation(relation)?;
        let mut assigns: Vec<(String, Assign)> = match set {
            Some(set) => column_values(set)?
                .into_iter()
                .map(|(c, v)| (c, Assign::Value(v)))
                .collect(),
            None => Vec::new(),
        };
        if let Some(add) = add {
            for (column, n) in column_values(add)? {
                if !matches!(n, Value::Integer(_) | Value::Real(_)) {
                    return Err(PyTypeError::new_err(format!(
                        "Update add={{{column:?}: ...}} takes an int or a float to add, not {n:?}"
                    )));
                }
                assigns.push((column, Assign::Add(n)));
            }
        }
        if let Some(fill) = fill_nulls {
            for (column, value) in column_values(fill)? {
                assigns.push((column, Assign::FillNull(value)));
            }
        }
        Ok(Update {
            op: WriteOp::Update(store::Update {
                relation,
                filter: required_filter(relation, r#where)?,
                set: assigns,
                must_match: must_match.then_some(NoMatch::Rows),
            }),
        })
    }
}

/// Deletes the rows `where` matches.
#[pyclass(frozen, module = "hermes._core")]
pub struct Delete {
    op: WriteOp,
}

#[pymethods]
impl Delete {
    #[new]
    #[pyo3(signature = (relation, r#where))]
    fn new(relation: &str, r#where: &Bound<'_, PyAny>) -> PyResult<Self> {
        let relation = self::relation(relation)?;
        Ok(Delete {
            op: WriteOp::Delete(store::Delete {
                relation,
                filter: required_filter(relation, r#where)?,
            }),
        })
    }
}

/// Message dicts appended to a session, as `Store.append` does.
#[pyclass(frozen, module = "hermes._core")]
pub struct Append {
    op: WriteOp,
}

#[pymethods]
impl Append {
    #[new]
    fn new(py: Python<'_>, session_id: String, messages: &Bound<'_, PyAny>) -> PyResult<Self> {
        let rows = crate::py_store::encode_messages(py, &session_id, messages.try_iter()?)?;
        Ok(Append {
            op: WriteOp::Append {
                session_id,
                rows,
                once_key: None,
            },
        })
    }
}

/// An update's or a delete's filter: given, so that no write touches every
/// row by leaving it out.
fn required_filter(relation: Relation, f: &Bound<'_, PyAny>) -> PyResult<Filter> {
    if f.is_none() {
        return Err(PyValueError::new_err(format!(
            "an update or delete of {relation} needs a filter (where=None would change every row)"
        )));
    }
    filter(relation, Some(f))
}

/// The write one op class holds.
pub fn write_op(op: &Bound<'_, PyAny>) -> PyResult<WriteOp> {
    if let Ok(o) = op.cast::<Insert>() {
        return Ok(o.get().op.clone());
    }
    if let Ok(o) = op.cast::<Update>() {
        return Ok(o.get().op.clone());
    }
    if let Ok(o) = op.cast::<Delete>() {
        return Ok(o.get().op.clone());
    }
    if let Ok(o) = op.cast::<Append>() {
        return Ok(o.get().op.clone());
    }
    Err(PyTypeError::new_err(format!(
        "Store.write takes Insert, Update, Delete and Append objects, not {}",
        op.repr()?
    )))
}

/// Builds `ops` (a list) into one transaction.
pub fn transaction(ops: &Bound<'_, PyAny>) -> PyResult<WriteOp> {
    let ops = match ops.cast::<PyList>() {
        Ok(list) => list
            .iter()
            .map(|op| write_op(&op))
            .collect::<PyResult<_>>()?,
        Err(_) => ops
            .try_iter()?
            .map(|op| write_op(&op?))
            .collect::<PyResult<_>>()?,
    };
    Ok(WriteOp::Transaction(ops))
}
