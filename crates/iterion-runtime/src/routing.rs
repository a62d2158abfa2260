//! What a node's output means for the graph: parsing stdout into the
//! output schema, evaluating outgoing edges in source order, bounding
//! loops, and building the next node's input from `with`.
//!
//! Pure functions; the engine owns the loop that calls them.

use std::collections::BTreeMap;

use iterion_core::NodeId;
use iterion_dsl::expr::{self, Expr, Resolve};
use iterion_dsl::ir::{Condition, Edge, FieldType, Schema, Target, Workflow};
use serde_json::{Map, Value};

use crate::template::{self, Scope, TemplateError};

/// What an expression reads (`when "…"` and `compute`): `input` (and bare
/// names) is the source node's output for an edge, the node's input for a
/// compute node; `vars`, every finished node's `outputs`, the published
/// `artifacts` and the `loop` state as the templates read them; `run`
/// reads as null.
pub(crate) struct ExprScope<'a> {
    /// What `input` names.
    pub input: &'a Value,
    /// Vars and outputs (with the artifacts and loop entries).
    pub scope: &'a Scope<'a>,
}

impl Resolve for ExprScope<'_> {
    fn resolve(&self, namespace: &str, path: &[String]) -> Option<Value> {
        let (first, rest) = match namespace {
            "input" => return expr::drill(self.input, path).cloned(),
            "vars" | "outputs" | "artifacts" | "loop" => path.split_first()?,
            _ => return None,
        };
        let key = |k: &str| self.scope.outputs.get(&NodeId::new(k));
        let root = match namespace {
            "vars" => self.scope.vars.get(first)?,
            "outputs" => key(first)?,
            "artifacts" => key(template::ARTIFACTS_KEY)?.get(first)?,
            _ => key(template::LOOPS_KEY)?.get(first)?,
        };
        expr::drill(root, rest).cloned()
    }
}

/// Whether a condition holds on a node's output: the one evaluation of
/// edge conditions. A `when field` reads a bool field (missing or not bool
/// is false; the compiler checked the schema, C013/C014). A `when "…"` is
/// parsed by `iterion_dsl::expr` — the parser the compiler ran (C040) — and
/// evaluated with upstream's semantics; an evaluation error (a type
/// mismatch, division by zero) makes the edge not taken, as upstream.
pub fn condition_holds(condition: &Condition, output: &Value, scope: &Scope<'_>) -> bool {
    match condition {
        Condition::Field { field, negated } => {
            output.get(field).and_then(Value::as_bool).unwrap_or(false) != *negated
        }
        Condition::Expr(text) => Expr::parse(text)
            .and_then(|e| {
                e.eval_bool(&ExprScope {
                    input: output,
                    scope,
                })
            })
            .unwrap_or(false),
    }
}

/// Why routing stopped the run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// No edge matched.
    #[error("no outgoing edge of node {node} matched its output")]
    NoOutgoingEdge {
        /// Node.
        node: String,
    },
    /// A loop went past its bound.
    #[error("loop {name} exceeded its bound of {max} iterations")]
    LoopLimitExceeded {
        /// Loop name.
        name: String,
        /// Bound.
        max: u32,
    },
    /// A `with` mapping did not render.
    #[error("with mapping {field} of edge {from} -> {to}: {source}")]
    With {
        /// Source node.
        from: String,
        /// Target.
        to: String,
        /// Target input field.
        field: String,
        /// Cause.
        #[source]
        source: TemplateError,
    },
}

/// The edge taken.
#[derive(Debug, Clone, PartialEq)]
pub struct Taken<'w> {
    /// The edge.
    pub edge: &'w Edge,
    /// Iteration of its loop (from 1), when it is a loop edge.
    pub iteration: Option<u32>,
    /// Input of the next node.
    pub input: Map<String, Value>,
}

/// Loop counters of one frame (the main path, or one branch).
#[derive(Debug, Default, Clone)]
pub struct Router {
    loops: BTreeMap<String, u32>,
}

impl Router {
    /// A router with every loop at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// A router continuing from `counters`.
    pub fn with_counters(counters: BTreeMap<String, u32>) -> Self {
        Self { loops: counters }
    }

    /// The loop counters now.
    pub fn counters(&self) -> &BTreeMap<String, u32> {
        &self.loops
    }

    /// Restart a loop's count (a fresh entry into it).
    pub fn reset(&mut self, name: &str) {
        self.loops.remove(name);
    }

    /// Count an edge a router picked by itself (round robin, llm): its
    /// loop's iteration, or the loop's bound as the error once exhausted.
    pub fn count(&mut self, edge: &Edge) -> Result<Option<u32>, RouteError> {
        if self.exhausted(edge)
            && let Some(bound) = &edge.loop_bound
        {
            return Err(RouteError::LoopLimitExceeded {
                name: bound.name.clone(),
                max: bound.max,
            });
        }
        Ok(edge.loop_bound.as_ref().map(|bound| {
            let count = self.loops.entry(bound.name.clone()).or_insert(0);
            *count += 1;
            *count
        }))
    }

    fn exhausted(&self, edge: &Edge) -> bool {
        edge.loop_bound
            .as_ref()
            .is_some_and(|b| self.loops.get(&b.name).copied().unwrap_or(0) >= b.max)
    }

    /// Pick the outgoing edge of `node` for `output` (upstream
    /// `evaluateEdgesWithLoopsRS`): the first conditional edge, in source
    /// order, whose condition holds; else the `else` edge; else the first
    /// unconditional edge. A loop edge whose loop is exhausted is skipped,
    /// so an exit edge can take over; when nothing is left and a skipped
    /// loop edge would have matched, the loop's bound is the error. Then
    /// count its loop and build the next input.
    pub fn route<'w>(
        &mut self,
        workflow: &'w Workflow,
        node: &'w iterion_core::NodeId,
        scope: &Scope<'_>,
        output: &Value,
    ) -> Result<Taken<'w>, RouteError> {
        let mut matched = None;
        let mut otherwise = None;
        let mut fallback = None;
        let mut blocked: Option<&Edge> = None;
        for e in workflow.edges_from(node) {
            let holds = match (&e.condition, e.is_else) {
                (Some(c), _) => condition_holds(c, output, scope),
                (None, _) => true,
            };
            if !holds {
                continue;
            }
            if self.exhausted(e) {
                blocked.get_or_insert(e);
                continue;
            }
            match (&e.condition, e.is_else) {
                (Some(_), _) => {
                    matched = Some(e);
                    break;
                }
                (None, true) => {
                    otherwise.get_or_insert(e);
                }
                (None, false) => {
                    fallback.get_or_insert(e);
                }
            }
        }
        let Some(edge) = matched.or(otherwise).or(fallback) else {
            return Err(match blocked.and_then(|e| e.loop_bound.as_ref()) {
                Some(bound) => RouteError::LoopLimitExceeded {
                    name: bound.name.clone(),
                    max: bound.max,
                },
                None => RouteError::NoOutgoingEdge {
                    node: node.to_string(),
                },
            });
        };
        let iteration = self.count(edge)?;
        let input = edge_input(workflow, edge, scope, output)?;
        Ok(Taken {
            edge,
            iteration,
            input,
        })
    }
}

/// The edges a `fan_out_all` router forks along: every plain edge, each
/// `when` edge whose condition holds on the router's output, and an
/// `else` edge when none of those conditions held. (Upstream forked along
/// every edge, conditions ignored, so `-> x when has_npm` ran `x` even
/// without npm.)
pub fn fan_out_edges<'w>(
    workflow: &'w Workflow,
    router: &'w iterion_core::NodeId,
    scope: &Scope<'_>,
    output: &Value,
) -> Vec<&'w Edge> {
    let mut picked = Vec::new();
    let mut any_condition = false;
    for e in workflow.edges_from(router) {
        match &e.condition {
            Some(c) if condition_holds(c, output, scope) => {
                any_condition = true;
                picked.push(e);
            }
            Some(_) => {}
            None if e.is_else => {}
            None => picked.push(e),
        }
    }
    if !any_condition {
        picked.extend(workflow.edges_from(router).filter(|e| e.is_else));
    }
    picked
}

/// The `round_robin` pick of a router (upstream `execRoundRobin`): its
/// unconditional edges in source order, the `position`-th modulo their
/// count. `None` when it has none.
pub fn round_robin<'w>(
    workflow: &'w Workflow,
    router: &'w iterion_core::NodeId,
    position: u32,
) -> Option<(&'w Edge, u32)> {
    let edges: Vec<&Edge> = workflow
        .edges_from(router)
        .filter(|e| e.condition.is_none() && !e.is_else)
        .collect();
    let n = u32::try_from(edges.len()).ok().filter(|n| *n > 0)?;
    let index = position % n;
    edges.get(index as usize).map(|e| (*e, index))
}

/// What `{{input.x}}` reads in a `with` mapping or a foreach collection
/// (upstream `buildNodeInputRS`): the source's output over the run's
/// variables — the mapping feeds the next node from what this one made.
pub fn edge_scope_input(scope: &Scope<'_>, output: &Value) -> Map<String, Value> {
    let mut input: Map<String, Value> = scope
        .vars
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Value::Object(fields) = output {
        input.extend(fields.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    input
}

/// The next node's input: the edge's `with` mappings rendered against
/// the source's output (`{{input.x}}`, [`edge_scope_input`]; `{{output.x}}`
/// too, for IR built by hand) and everything else `scope` holds. A router
/// reached by an edge without `with` gets the source's output: routers
/// pass their input through, and their edges' conditions then read the
/// node that routed to them (upstream's documented reading: "boolean
/// fields in the upstream node's output"; its code passed an empty input).
pub fn edge_input(
    workflow: &Workflow,
    edge: &Edge,
    scope: &Scope<'_>,
    output: &Value,
) -> Result<Map<String, Value>, RouteError> {
    if edge.with.is_empty()
        && let Target::Node(to) = &edge.to
        && workflow
            .nodes
            .get(to)
            .is_some_and(|n| n.kind == iterion_dsl::ir::NodeKind::Router)
        && let Value::Object(fields) = output
    {
        return Ok(fields.clone());
    }
    let input = edge_scope_input(scope, output);
    let with_scope = Scope {
        input: &input,
        output: Some(output),
        ..*scope
    };
    let mut input = Map::new();
    for (field, expr) in &edge.with {
        let value =
            template::render_value(expr, &with_scope).map_err(|source| RouteError::With {
                from: edge.from.to_string(),
                to: target_name(&edge.to).to_owned(),
                field: field.clone(),
                source,
            })?;
        input.insert(field.clone(), value);
    }
    Ok(input)
}

/// Display name of a target.
pub fn target_name(target: &Target) -> &str {
    match target {
        Target::Node(n) => n.as_str(),
        Target::Done => "done",
        Target::Fail => "fail",
    }
}

/// Text of a condition for events.
pub fn condition_text(condition: &Condition) -> String {
    match condition {
        Condition::Field {
            field,
            negated: false,
        } => field.clone(),
        Condition::Field {
            field,
            negated: true,
        } => format!("not {field}"),
        Condition::Expr(e) => format!("{e:?}"),
    }
}

/// Why stdout did not fit the output schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    /// A declared field is absent.
    #[error("output field {field} is missing")]
    Missing {
        /// Field.
        field: String,
    },
    /// A field has the wrong type.
    #[error("output field {field} is not a {expected}")]
    WrongType {
        /// Field.
        field: String,
        /// Expected type.
        expected: &'static str,
    },
    /// A value outside the field's enum.
    #[error("output field {field} value {value:?} is not one of {allowed:?}")]
    NotInEnum {
        /// Field.
        field: String,
        /// Value.
        value: String,
        /// Allowed values.
        allowed: Vec<String>,
    },
}

fn has_type(value: &Value, ty: FieldType) -> bool {
    match ty {
        FieldType::String => value.is_string(),
        FieldType::Bool => value.is_boolean(),
        FieldType::Int => value.is_i64() || value.is_u64(),
        FieldType::Float => value.is_number(),
        FieldType::Json => true,
        FieldType::StringArray => value
            .as_array()
            .is_some_and(|a| a.iter().all(Value::is_string)),
    }
}

/// Parse tool stdout: a JSON object when it is one (and was not cut),
/// else `{"result": <trimmed stdout>}` (facts §2.6; upstream
/// `executor_tool.go`). Not checked against the node's schema: upstream
/// never validates tool outputs ([`output_errors`] says what differs).
pub fn parse_output(stdout: &[u8], truncated: bool) -> Map<String, Value> {
    let text = String::from_utf8_lossy(stdout);
    let trimmed = text.trim();
    let object = if truncated {
        None
    } else {
        match serde_json::from_str::<Value>(trimmed) {
            Ok(Value::Object(map)) => Some(map),
            _ => None,
        }
    };
    object.unwrap_or_else(|| {
        let mut m = Map::new();
        m.insert("result".into(), Value::String(trimmed.to_owned()));
        m
    })
}

/// Check a node's output object against its declared schema (every
/// field present, of its type, within its enum); extra fields are kept.
pub fn check_output(
    object: Map<String, Value>,
    schema: Option<&Schema>,
) -> Result<Value, OutputError> {
    match output_errors(&object, schema).into_iter().next() {
        Some(e) => Err(e),
        None => Ok(Value::Object(object)),
    }
}

/// Every way an output object differs from its schema (empty: it fits).
pub fn output_errors(object: &Map<String, Value>, schema: Option<&Schema>) -> Vec<OutputError> {
    let mut errors = Vec::new();
    if let Some(schema) = schema {
        'fields: for field in &schema.fields {
            let Some(value) = object.get(&field.name) else {
                errors.push(OutputError::Missing {
                    field: field.name.clone(),
                });
                continue;
            };
            if !has_type(value, field.ty) {
                errors.push(OutputError::WrongType {
                    field: field.name.clone(),
                    expected: field.ty.word(),
                });
                continue;
            }
            if !field.enum_values.is_empty() {
                // A `string[]` enum constrains each item.
                let items: Vec<&Value> = match (field.ty, value) {
                    (FieldType::StringArray, Value::Array(items)) => items.iter().collect(),
                    _ => vec![value],
                };
                for item in items {
                    let text = template::value_text(item);
                    if !field.enum_values.contains(&text) {
                        errors.push(OutputError::NotInEnum {
                            field: field.name.clone(),
                            value: text,
                            allowed: field.enum_values.clone(),
                        });
                        continue 'fields;
                    }
                }
            }
        }
    }
    errors
}

/// Coerce a `--var` string to the declared type.
pub fn coerce_var(text: &str, ty: FieldType) -> Option<Value> {
    match ty {
        FieldType::String => Some(Value::String(text.to_owned())),
        FieldType::Bool => match text {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        FieldType::Int => text.parse::<i64>().ok().map(Value::from),
        FieldType::Float => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        FieldType::Json => serde_json::from_str(text).ok(),
        FieldType::StringArray => match serde_json::from_str::<Value>(text) {
            Ok(v) if has_type(&v, FieldType::StringArray) => Some(v),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::NodeId;
    use iterion_dsl::ir::{Field, LoopBound, Pos};
    use proptest::prelude::*;
    use serde_json::json;

    fn edge(from: &str, to: Target, condition: Option<Condition>) -> Edge {
        Edge {
            from: NodeId::new(from),
            to,
            condition,
            loop_bound: None,
            with: BTreeMap::new(),
            is_else: false,
            foreach: None,
            pos: Pos::default(),
        }
    }

    fn workflow(edges: Vec<Edge>) -> Workflow {
        Workflow {
            name: "w".into(),
            entry: NodeId::new("a"),
            nodes: BTreeMap::new(),
            edges,
            vars: BTreeMap::new(),
            schemas: BTreeMap::new(),
            sandbox: None,
            worktree: None,
            budget: BTreeMap::new(),
            secrets: Vec::new(),
            prompts: BTreeMap::new(),
            properties: BTreeMap::new(),
            mcp_servers: Default::default(),
            attachments: Default::default(),
            presets: Default::default(),
            pos: Pos::default(),
        }
    }

    fn route(wf: &Workflow, r: &mut Router, output: &Value) -> Result<String, RouteError> {
        let vars = BTreeMap::new();
        let input = Map::new();
        let outputs = BTreeMap::new();
        let scope = Scope {
            vars: &vars,
            input: &input,
            outputs: &outputs,
            output: None,
        };
        let node = NodeId::new("a");
        r.route(wf, &node, &scope, output)
            .map(|t| target_name(&t.edge.to).to_owned())
    }

    #[test]
    fn edges_in_source_order_with_fallback() {
        let wf = workflow(vec![
            edge(
                "a",
                Target::Done,
                Some(Condition::Field {
                    field: "ok".into(),
                    negated: false,
                }),
            ),
            edge(
                "a",
                Target::Node(NodeId::new("b")),
                Some(Condition::Expr("verdict == \"retry\"".into())),
            ),
            edge("a", Target::Fail, None),
            edge("a", Target::Done, None),
        ]);
        let mut r = Router::new();
        assert_eq!(route(&wf, &mut r, &json!({"ok": true})).expect("r"), "done");
        assert_eq!(
            route(&wf, &mut r, &json!({"ok": false, "verdict": "retry"})).expect("r"),
            "b"
        );
        assert_eq!(
            route(&wf, &mut r, &json!({"ok": "true"})).expect("r"),
            "fail"
        );
    }

    #[test]
    fn else_only_when_no_sibling_matched() {
        let mut otherwise = edge("a", Target::Fail, None);
        otherwise.is_else = true;
        let wf = workflow(vec![
            otherwise,
            edge(
                "a",
                Target::Done,
                Some(Condition::Field {
                    field: "ok".into(),
                    negated: false,
                }),
            ),
        ]);
        let mut r = Router::new();
        assert_eq!(route(&wf, &mut r, &json!({"ok": true})).expect("r"), "done");
        assert_eq!(
            route(&wf, &mut r, &json!({"ok": false})).expect("r"),
            "fail"
        );
    }

    #[test]
    fn no_edge_is_an_error() {
        let wf = workflow(vec![edge(
            "a",
            Target::Done,
            Some(Condition::Field {
                field: "ok".into(),
                negated: true,
            }),
        )]);
        assert!(matches!(
            route(&wf, &mut Router::new(), &json!({"ok": true})),
            Err(RouteError::NoOutgoingEdge { .. })
        ));
    }

    #[test]
    fn loops_stop_at_their_bound() {
        let mut e = edge("a", Target::Node(NodeId::new("a")), None);
        e.loop_bound = Some(LoopBound {
            name: "again".into(),
            max: 3,
            unbounded: false,
        });
        let wf = workflow(vec![e]);
        let mut r = Router::new();
        for _ in 0..3 {
            assert_eq!(route(&wf, &mut r, &json!({})).expect("within bound"), "a");
        }
        assert_eq!(
            route(&wf, &mut r, &json!({})),
            Err(RouteError::LoopLimitExceeded {
                name: "again".into(),
                max: 3
            })
        );
    }

    #[test]
    fn a_conditional_edge_beats_an_earlier_unconditional_one() {
        // upstream: conditional edges first, the first unconditional edge
        // is only the fallback.
        let wf = workflow(vec![
            edge("a", Target::Fail, None),
            edge(
                "a",
                Target::Done,
                Some(Condition::Field {
                    field: "ok".into(),
                    negated: false,
                }),
            ),
        ]);
        let mut r = Router::new();
        assert_eq!(route(&wf, &mut r, &json!({"ok": true})).expect("r"), "done");
        assert_eq!(
            route(&wf, &mut r, &json!({"ok": false})).expect("r"),
            "fail"
        );
    }

    #[test]
    fn an_exhausted_loop_edge_yields_to_the_exit() {
        // verify -> fix when not pass as retry(2); verify -> done (exit)
        let mut back = edge(
            "a",
            Target::Node(NodeId::new("a")),
            Some(Condition::Field {
                field: "pass".into(),
                negated: true,
            }),
        );
        back.loop_bound = Some(LoopBound {
            name: "retry".into(),
            max: 2,
            unbounded: false,
        });
        let wf = workflow(vec![back, edge("a", Target::Done, None)]);
        let mut r = Router::new();
        let fail = json!({"pass": false});
        assert_eq!(route(&wf, &mut r, &fail).expect("1"), "a");
        assert_eq!(route(&wf, &mut r, &fail).expect("2"), "a");
        assert_eq!(route(&wf, &mut r, &fail).expect("exit"), "done");
        assert_eq!(r.counters().get("retry"), Some(&2));
        r.reset("retry");
        assert_eq!(route(&wf, &mut r, &fail).expect("fresh"), "a");
    }

    #[test]
    fn round_robin_cycles_over_unconditional_edges() {
        let wf = workflow(vec![
            edge("a", Target::Node(NodeId::new("x")), None),
            edge(
                "a",
                Target::Done,
                Some(Condition::Field {
                    field: "f".into(),
                    negated: false,
                }),
            ),
            edge("a", Target::Node(NodeId::new("y")), None),
        ]);
        let a = NodeId::new("a");
        let picks: Vec<(String, u32)> = (0..4)
            .map(|p| {
                let (e, i) = round_robin(&wf, &a, p).expect("edge");
                (target_name(&e.to).to_owned(), i)
            })
            .collect();
        assert_eq!(
            picks,
            [
                ("x".to_owned(), 0),
                ("y".to_owned(), 1),
                ("x".to_owned(), 0),
                ("y".to_owned(), 1)
            ]
        );
        assert!(round_robin(&wf, &NodeId::new("none"), 0).is_none());
    }

    #[test]
    fn with_builds_the_next_input() {
        let mut e = edge("a", Target::Node(NodeId::new("b")), None);
        e.with.insert("n".into(), "{{output.count}}".into());
        e.with.insert("msg".into(), "got {{output.count}}".into());
        let wf = workflow(vec![e]);
        let vars = BTreeMap::new();
        let input = Map::new();
        let outputs = BTreeMap::new();
        let scope = Scope {
            vars: &vars,
            input: &input,
            outputs: &outputs,
            output: None,
        };
        let node = NodeId::new("a");
        let t = Router::new()
            .route(&wf, &node, &scope, &json!({"count": 2}))
            .expect("route");
        assert_eq!(Value::Object(t.input), json!({"n": 2, "msg": "got 2"}));
    }

    #[test]
    fn conditions_read_output_vars_and_outputs() {
        let vars = BTreeMap::from([("limit".to_string(), json!(3))]);
        let input = Map::new();
        let outputs = BTreeMap::from([(NodeId::new("prev"), json!({"score": 0.9}))]);
        let scope = Scope {
            vars: &vars,
            input: &input,
            outputs: &outputs,
            output: None,
        };
        let out = json!({"ok": true, "status": "x", "count": 4, "items": [1, 2]});
        let holds = |text: &str| condition_holds(&Condition::Expr(text.into()), &out, &scope);
        for yes in [
            "ok",
            "not ok == false",
            "status != 'y'",
            "count > vars.limit",
            "outputs.prev.score >= 0.5 && length(items) == 2",
            "input.count % 2 == 0",
        ] {
            assert!(holds(yes), "{yes}");
        }
        // false, a type error, a missing path, a parse error: not taken
        for no in [
            "!ok",
            "status < 3",
            "missing.field",
            "count >",
            "1 / 0 == 1",
        ] {
            assert!(!holds(no), "{no}");
        }
        let field = Condition::Field {
            field: "ok".into(),
            negated: true,
        };
        assert!(!condition_holds(&field, &out, &scope));
    }

    fn schema(fields: &[(&str, FieldType)]) -> Schema {
        Schema {
            fields: fields
                .iter()
                .map(|(n, t)| Field {
                    name: (*n).into(),
                    ty: *t,
                    enum_values: Vec::new(),
                })
                .collect(),
        }
    }

    /// Upstream `executor_tool.go`: stdout as a JSON object, else
    /// `{"result": <trimmed stdout>}`; never checked against the schema
    /// there, so parsing and checking are apart here.
    #[test]
    fn output_parsing() {
        let s = schema(&[("ok", FieldType::Bool), ("n", FieldType::Int)]);
        let parsed = |b: &[u8], cut| Value::Object(parse_output(b, cut));
        assert_eq!(
            parsed(b" {\"ok\": true, \"x\": 1}\n", false),
            json!({"ok": true, "x": 1})
        );
        let wrong = parse_output(b"{\"ok\": \"yes\"}", false);
        let errors = output_errors(&wrong, Some(&s));
        assert!(matches!(errors[0], OutputError::WrongType { .. }));
        assert!(matches!(errors[1], OutputError::Missing { .. }));
        assert_eq!(errors.len(), 2);
        assert!(matches!(
            check_output(parse_output(b"hello", false), Some(&s)),
            Err(OutputError::Missing { .. })
        ));
        assert_eq!(
            parsed(b"  hi there\n", false),
            json!({"result": "hi there"})
        );
        assert_eq!(parsed(b"[1,2]", false), json!({"result": "[1,2]"}));
        // A cut object is never half-parsed.
        assert_eq!(
            parsed(b"{\"ok\": true}", true),
            json!({"result": "{\"ok\": true}"})
        );
        assert!(
            output_errors(&parse_output(b"{\"ok\": true, \"n\": 2}", false), Some(&s)).is_empty()
        );
    }

    #[test]
    fn var_coercion() {
        assert_eq!(coerce_var("3", FieldType::Int), Some(json!(3)));
        assert_eq!(coerce_var("x", FieldType::Int), None);
        assert_eq!(coerce_var("true", FieldType::Bool), Some(json!(true)));
        assert_eq!(
            coerce_var("[\"a\"]", FieldType::StringArray),
            Some(json!(["a"]))
        );
        assert_eq!(coerce_var("[1]", FieldType::StringArray), None);
    }

    proptest! {
        #[test]
        fn parse_output_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), cut in any::<bool>()) {
            let s = schema(&[("result", FieldType::String)]);
            let _ = output_errors(&parse_output(&bytes, cut), Some(&s));
        }

        #[test]
        fn conditions_never_panic(t in ".{0,40}") {
            let vars = BTreeMap::new();
            let input = Map::new();
            let outputs = BTreeMap::new();
            let scope = Scope { vars: &vars, input: &input, outputs: &outputs, output: None };
            let _ = condition_holds(&Condition::Expr(t), &json!({"a": 1}), &scope);
        }
    }
}
