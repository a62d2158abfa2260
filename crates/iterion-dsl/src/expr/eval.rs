//! Evaluation of a parsed [`super::Expr`] over a caller's [`Resolve`]:
//! upstream's truthiness, equality (no cross-type coercion), ordering,
//! checked integer arithmetic, string concatenation and builtins. Owns no
//! syntax.

use serde_json::{Map, Number, Value};

use super::ast::{Func, Node, Op, STACK_GROW, STACK_RED_ZONE, is_namespace};
use super::error::{ExprError, eval_err};

/// What paths resolve to. `path` is what follows the namespace; `None`
/// reads as null (upstream: an absent path is nil, never an error).
pub trait Resolve {
    /// The value at `namespace.path…`.
    fn resolve(&self, namespace: &str, path: &[String]) -> Option<Value>;
}

/// Upstream truthiness: null, false, 0, empty string/array/object are
/// false, and so are the strings "false", "no" and "0" (any case, trimmed).
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !matches!(
            s.trim().to_ascii_lowercase().as_str(),
            "" | "false" | "no" | "0"
        ),
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

pub(crate) fn eval(n: &Node, scope: &dyn Resolve) -> Result<Value, ExprError> {
    stacker::maybe_grow(STACK_RED_ZONE, STACK_GROW, || eval_node(n, scope))
}

fn eval_node(n: &Node, scope: &dyn Resolve) -> Result<Value, ExprError> {
    match n {
        Node::Lit(v) => Ok(v.clone()),
        Node::Path { namespace, path } => Ok(if is_namespace(namespace) {
            scope.resolve(namespace, path)
        } else {
            let full: Vec<String> = std::iter::once(namespace.clone())
                .chain(path.iter().cloned())
                .collect();
            scope.resolve("input", &full)
        }
        .unwrap_or(Value::Null)),
        Node::Not(c) => Ok(Value::Bool(!truthy(&eval(c, scope)?))),
        Node::Neg(c) => match eval(c, scope)? {
            Value::Number(x) => {
                if let Some(i) = x.as_i64() {
                    i.checked_neg()
                        .map(Value::from)
                        .ok_or_else(|| eval_err("integer negation overflow"))
                } else {
                    Ok(float(-x.as_f64().unwrap_or(0.0)))
                }
            }
            other => Err(eval_err(format!("cannot negate {}", kind(&other)))),
        },
        Node::Chain { first, rest } => {
            let mut acc = eval(first, scope)?;
            for (op, next) in rest {
                acc = match op {
                    Op::Or => {
                        if truthy(&acc) {
                            return Ok(Value::Bool(true));
                        }
                        Value::Bool(truthy(&eval(next, scope)?))
                    }
                    Op::And => {
                        if !truthy(&acc) {
                            return Ok(Value::Bool(false));
                        }
                        Value::Bool(truthy(&eval(next, scope)?))
                    }
                    op => binary(*op, &acc, &eval(next, scope)?)?,
                };
            }
            Ok(acc)
        }
        Node::Call { func, args } => call(*func, args, scope),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// An integer view: integers, and floats with no fractional part (JSON
/// numbers decoded as floats compare and add as integers upstream).
fn as_int(v: &Value) -> Option<i64> {
    let n = v.as_number()?;
    n.as_i64().or_else(|| {
        let f = n.as_f64()?;
        (f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64).then_some(f as i64)
    })
}

/// Upstream's `%v` text of a value, for string concatenation and the
/// string-keyed builtins.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".into(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

fn equals(a: &Value, b: &Value) -> bool {
    if let (Some(x), Some(y)) = (as_int(a), as_int(b)) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (a.as_f64(), b.as_f64()) {
        return x == y;
    }
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        // heterogeneous types are never equal (upstream F-DSL: 5 != "5")
        _ => false,
    }
}

fn binary(op: Op, a: &Value, b: &Value) -> Result<Value, ExprError> {
    match op {
        Op::Eq => return Ok(Value::Bool(equals(a, b))),
        Op::Ne => return Ok(Value::Bool(!equals(a, b))),
        Op::Lt | Op::Le | Op::Gt | Op::Ge => {
            let ord = match (a.as_f64(), b.as_f64(), a, b) {
                (Some(x), Some(y), _, _) => x.partial_cmp(&y),
                (_, _, Value::String(x), Value::String(y)) => Some(x.cmp(y)),
                _ => None,
            }
            .ok_or_else(|| {
                eval_err(format!(
                    "cannot compare {} {} {}",
                    kind(a),
                    op.text(),
                    kind(b)
                ))
            })?;
            use std::cmp::Ordering::{Greater, Less};
            return Ok(Value::Bool(match op {
                Op::Lt => ord == Less,
                Op::Le => ord != Greater,
                Op::Gt => ord == Greater,
                _ => ord != Less,
            }));
        }
        _ => {}
    }
    if op == Op::Add {
        match (a, b) {
            (Value::String(x), Value::String(y)) => return Ok(Value::String(format!("{x}{y}"))),
            (Value::String(x), Value::Number(_)) => {
                return Ok(Value::String(format!("{x}{}", text(b))));
            }
            (Value::Number(_), Value::String(y)) => {
                return Ok(Value::String(format!("{}{y}", text(a))));
            }
            (Value::String(_), _) | (_, Value::String(_)) => {
                return Err(eval_err(format!(
                    "cannot concatenate {} with {}",
                    kind(a),
                    kind(b)
                )));
            }
            _ => {}
        }
    }
    if let (Some(x), Some(y)) = (as_int(a), as_int(b)) {
        let r = match op {
            Op::Add => x.checked_add(y),
            Op::Sub => x.checked_sub(y),
            Op::Mul => x.checked_mul(y),
            Op::Div if y == 0 => return Err(eval_err("integer division by zero")),
            Op::Div => x.checked_div(y),
            Op::Rem if y == 0 => return Err(eval_err("integer modulo by zero")),
            Op::Rem => x.checked_rem(y),
            _ => None,
        };
        return r
            .map(Value::from)
            .ok_or_else(|| eval_err(format!("integer overflow in {x} {} {y}", op.text())));
    }
    if let (Some(x), Some(y)) = (a.as_f64(), b.as_f64()) {
        return match op {
            Op::Add => Ok(float(x + y)),
            Op::Sub => Ok(float(x - y)),
            Op::Mul => Ok(float(x * y)),
            Op::Div if y == 0.0 => Err(eval_err("float division by zero")),
            Op::Div => Ok(float(x / y)),
            _ => Err(eval_err(format!("cannot apply {} to floats", op.text()))),
        };
    }
    Err(eval_err(format!(
        "cannot apply {} to {} and {}",
        op.text(),
        kind(a),
        kind(b)
    )))
}

fn call(func: Func, args: &[Node], scope: &dyn Resolve) -> Result<Value, ExprError> {
    if func == Func::If && args.len() == 3 {
        // short-circuit: the branch not taken is never evaluated
        let branch = if truthy(&eval(&args[0], scope)?) {
            &args[1]
        } else {
            &args[2]
        };
        return eval(branch, scope);
    }
    let vals = args
        .iter()
        .map(|a| eval(a, scope))
        .collect::<Result<Vec<_>, _>>()?;
    let arity = |name: &str, n: usize| {
        if vals.len() == n {
            Ok(())
        } else {
            Err(eval_err(format!(
                "{name}() takes {n} argument(s), got {}",
                vals.len()
            )))
        }
    };
    let array = |name: &str, v: &Value| match v {
        Value::Array(a) => Ok(a.clone()),
        Value::Null => Ok(Vec::new()),
        other => Err(eval_err(format!(
            "{name}() expects an array, got {}",
            kind(other)
        ))),
    };
    match func {
        Func::If => {
            arity("if", 3)?;
            Ok(Value::Null)
        }
        Func::Length => {
            arity("length", 1)?;
            let n = match &vals[0] {
                Value::Null => 0,
                Value::Array(a) => a.len(),
                // upstream counts bytes
                Value::String(s) => s.len(),
                Value::Object(o) => o.len(),
                other => {
                    return Err(eval_err(format!(
                        "length() expects an array, string or object, got {}",
                        kind(other)
                    )));
                }
            };
            Ok(Value::from(n))
        }
        Func::Concat => {
            if vals.is_empty() {
                return Err(eval_err("concat() takes at least 1 argument"));
            }
            let mut out = Vec::new();
            for v in &vals {
                out.extend(array("concat", v)?);
            }
            Ok(Value::Array(out))
        }
        Func::Unique => {
            arity("unique", 1)?;
            let mut seen = foldhash::HashSet::default();
            Ok(Value::Array(
                array("unique", &vals[0])?
                    .into_iter()
                    .filter(|v| seen.insert(text(v)))
                    .collect(),
            ))
        }
        Func::Contains => {
            arity("contains", 2)?;
            let want = text(&vals[1]);
            Ok(Value::Bool(
                array("contains", &vals[0])?.iter().any(|v| text(v) == want),
            ))
        }
        Func::Join => {
            arity("join", 2)?;
            let Value::String(sep) = &vals[1] else {
                return Err(eval_err(format!(
                    "join() expects a string separator, got {}",
                    kind(&vals[1])
                )));
            };
            let parts: Vec<String> = array("join", &vals[0])?.iter().map(text).collect();
            Ok(Value::String(parts.join(sep)))
        }
    }
}

/// A [`Resolve`] over plain JSON maps, for callers that hold the values.
#[derive(Debug, Default, Clone, Copy)]
pub struct MapScope<'a> {
    /// `vars.…`
    pub vars: Option<&'a Map<String, Value>>,
    /// `input.…` and bare identifiers.
    pub input: Option<&'a Value>,
    /// `outputs.NODE.…`
    pub outputs: Option<&'a Map<String, Value>>,
}

/// The value at `path` under `root` (objects by key, arrays by index).
pub fn drill<'v>(root: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(root, |v, k| match v {
        Value::Object(m) => m.get(k),
        Value::Array(a) => k.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

impl Resolve for MapScope<'_> {
    fn resolve(&self, namespace: &str, path: &[String]) -> Option<Value> {
        match namespace {
            "vars" => {
                let (first, rest) = path.split_first()?;
                drill(self.vars?.get(first)?, rest).cloned()
            }
            "input" => drill(self.input?, path).cloned(),
            "outputs" => {
                let (first, rest) = path.split_first()?;
                drill(self.outputs?.get(first)?, rest).cloned()
            }
            _ => None,
        }
    }
}
