//! Top-level declarations other than the workflow: node blocks (their
//! tables, per-kind value checks, schema/prompt references), schemas, vars
//! and secrets, and the loose `presets:`/`attachments:` blocks. Owns no
//! edge or graph rule.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::collections::BTreeMap;

use crate::diag::{Severity, codes};
use crate::ir::{Field, FieldType, NodeKind, Pos, Schema, SecretDecl, SecretDelivery, VarDecl};
use crate::lexer::{STok, Tok};
use crate::parser::{Line, PValue, parse_value};

use super::ctx::{Ctx, short};
use super::props::{
    AWAIT_ANSWERS, COMPUTE, EMIT, FAIL, HUMAN, JOIN, K, LANGUAGES, LLM, Prop, REASONING, ROUTER,
    ROUTER_MODES, SUBBOT, TOOL, WAIT,
};

/// A declared node before IR construction.
pub(crate) struct NodeDecl<'a> {
    pub(crate) id: String,
    pub(crate) kind: NodeKind,
    pub(crate) pos: Pos,
    pub(crate) props: Vec<Prop<'a>>,
}

impl<'a> NodeDecl<'a> {
    pub(crate) fn get(&self, key: &str) -> Option<&Prop<'a>> {
        self.props.iter().find(|p| p.key == key)
    }
    pub(crate) fn text(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Prop::text)
    }
}

/// Entries of `presets:` / `attachments:`: `name: value` lines, each may
/// carry its own indented block of `key: value` lines.
pub(crate) fn loose_block(lines: &[Line], ctx: &mut Ctx<'_>, what: &str) {
    for l in lines {
        match l.toks.as_slice() {
            [
                STok {
                    tok: Tok::Word(_), ..
                },
                STok {
                    tok: Tok::Colon, ..
                },
                ..,
            ] => {
                for c in &l.children {
                    let _ = ctx.prop(c, None, what);
                }
            }
            _ => ctx.error(
                codes::E001,
                l.pos(),
                format!("expected `name: …` in {what}, found `{}`", short(&l.toks)),
            ),
        }
    }
}

pub(crate) fn node_kind(k: &str) -> Option<NodeKind> {
    Some(match k {
        "agent" => NodeKind::Agent,
        "judge" => NodeKind::Judge,
        "router" => NodeKind::Router,
        "human" => NodeKind::Human,
        "tool" => NodeKind::Tool,
        "compute" => NodeKind::Compute,
        "emit" => NodeKind::Emit,
        "wait" => NodeKind::Wait,
        "await_answers" => NodeKind::AwaitAnswers,
        "subbot" => NodeKind::Subbot,
        "fail" => NodeKind::Fail,
        "join" => NodeKind::Join,
        _ => return None,
    })
}

pub(crate) fn node_props<'a>(kind: NodeKind, line: &'a Line, ctx: &mut Ctx<'_>) -> Vec<Prop<'a>> {
    let table = match kind {
        NodeKind::Agent | NodeKind::Judge => LLM,
        NodeKind::Router => ROUTER,
        NodeKind::Human => HUMAN,
        NodeKind::Tool => TOOL,
        NodeKind::Compute => COMPUTE,
        NodeKind::Emit => EMIT,
        NodeKind::Wait => WAIT,
        NodeKind::AwaitAnswers => AWAIT_ANSWERS,
        NodeKind::Subbot => SUBBOT,
        NodeKind::Fail => FAIL,
        NodeKind::Join => JOIN,
    };
    let what = format!("{} node", kind.as_str());
    let props = ctx.props(&line.children, Some(table), &what);
    let mut seen: HashMap<&str, Pos> = HashMap::new();
    for p in &props {
        if seen.insert(p.key.as_str(), p.pos).is_some() {
            ctx.error(
                codes::E010,
                p.pos,
                format!("duplicate property `{}`", p.key),
            );
        }
        match p.key.as_str() {
            "reasoning_effort" => {
                if let Some(w) = p.text()
                    && !w.contains("${")
                    && !w.contains("{{")
                    && !REASONING.contains(&w)
                {
                    // upstream: a bare word is refused by the parser (E020),
                    // a quoted literal by the validator (C027)
                    let code = if matches!(p.value, Some(PValue::Word(_))) {
                        codes::E020
                    } else {
                        codes::C027
                    };
                    ctx.push(
                        code,
                        Severity::Error,
                        p.value_pos,
                        format!("invalid reasoning_effort `{w}`"),
                        Some("use low, medium, high, xhigh, max or ultracode"),
                    );
                }
            }
            "mode" if kind == NodeKind::Router => {
                if let Some(w) = p.text()
                    && !ROUTER_MODES.contains(&w)
                {
                    ctx.push(
                        codes::E020,
                        Severity::Error,
                        p.value_pos,
                        format!("invalid router mode `{w}`"),
                        Some("use fan_out_all, fan_out_each, condition, round_robin or llm"),
                    );
                }
            }
            "language" => {
                if let Some(w) = p.text()
                    && !LANGUAGES.contains(&w)
                {
                    ctx.push(
                        codes::E020,
                        Severity::Error,
                        p.value_pos,
                        format!("invalid script language `{w}`"),
                        Some("use sh, bash, js or py"),
                    );
                }
            }
            "expr" if p.value.is_none() => {
                let _ = ctx.props(&p.line.children, None, "expr");
            }
            "mcp" if p.value.is_none() => {
                let _ = ctx.props(&p.line.children, Some(super::mcp::MCP_CONFIG), "mcp");
            }
            "memory" if p.value.is_none() => {
                let _ = ctx.props(&p.line.children, Some(super::mcp::MEMORY), "memory");
            }
            _ => {}
        }
    }
    if kind == NodeKind::Tool {
        let has_cmd = seen.contains_key("command");
        let has_script = seen.contains_key("script");
        let has_action = seen.contains_key("action");
        if has_cmd && has_script {
            ctx.error(
                codes::E020,
                line.pos(),
                "a tool node sets both `command:` and `script:`",
            );
        } else if !has_cmd && !has_script && !has_action {
            ctx.push(
                codes::E013,
                Severity::Error,
                line.toks.get(1).map_or(line.pos(), |t| t.pos),
                "tool node has no `command:` (or `script:`)",
                Some("add `command: \"…\"`"),
            );
        }
    }
    props
}

pub(crate) fn check_node_refs(
    n: &NodeDecl<'_>,
    schemas: &BTreeMap<String, Schema>,
    prompts: &HashSet<String>,
    ctx: &mut Ctx<'_>,
) {
    for p in &n.props {
        let Some(v) = p.value.as_ref().and_then(PValue::ident) else {
            continue;
        };
        match p.key.as_str() {
            "input" | "output" if !schemas.contains_key(v) => {
                ctx.push(
                    codes::C002,
                    Severity::Error,
                    p.value_pos,
                    format!("unknown schema `{v}`"),
                    Some("declare the schema or fix the name"),
                );
            }
            "system" | "user" | "interaction_prompt" | "instructions" if !prompts.contains(v) => {
                ctx.push(
                    codes::C003,
                    Severity::Error,
                    p.value_pos,
                    format!("unknown prompt `{v}`"),
                    Some("declare the prompt or fix the name"),
                );
            }
            _ => {}
        }
    }
}

pub(crate) fn parse_type(toks: &[STok], allow_file: bool) -> Option<(FieldType, usize)> {
    let Some(Tok::Word(w)) = toks.first().map(|t| &t.tok) else {
        return None;
    };
    let ty = match w.as_str() {
        "string" => {
            if toks.get(1).map(|t| &t.tok) == Some(&Tok::LBrack)
                && toks.get(2).map(|t| &t.tok) == Some(&Tok::RBrack)
                && toks[1].glued
            {
                return Some((FieldType::StringArray, 3));
            }
            FieldType::String
        }
        "bool" => FieldType::Bool,
        "int" => FieldType::Int,
        "float" => FieldType::Float,
        "json" => FieldType::Json,
        // a schema field may be `file` (upstream E021 hint); carried as string
        "file" if allow_file => FieldType::String,
        _ => return None,
    };
    Some((ty, 1))
}

/// `[enum: "a", "b"]` at `toks[0]`; returns values and tokens used.
pub(crate) fn parse_enum(toks: &[STok]) -> Option<(Vec<String>, usize)> {
    if toks.first().map(|t| &t.tok) != Some(&Tok::LBrack) {
        return None;
    }
    if !matches!(toks.get(1).map(|t| &t.tok), Some(Tok::Word(w)) if w == "enum") {
        return None;
    }
    if toks.get(2).map(|t| &t.tok) != Some(&Tok::Colon) {
        return None;
    }
    let mut vals = Vec::new();
    let mut i = 3;
    loop {
        match toks.get(i).map(|t| &t.tok) {
            Some(Tok::Str(s, _)) | Some(Tok::Word(s)) => vals.push(s.clone()),
            Some(Tok::Comma) => {}
            Some(Tok::RBrack) => return Some((vals, i + 1)),
            _ => return None,
        }
        i += 1;
    }
}

pub(crate) fn read_schema(lines: &[Line], ctx: &mut Ctx<'_>) -> Schema {
    let mut s = Schema::default();
    let mut seen = HashSet::new();
    for l in lines {
        let toks = &l.toks;
        let (Some(Tok::Word(name)), Some(Tok::Colon)) =
            (toks.first().map(|t| &t.tok), toks.get(1).map(|t| &t.tok))
        else {
            ctx.error(
                codes::E001,
                l.pos(),
                format!("expected `field: type`, found `{}`", short(toks)),
            );
            continue;
        };
        let rest = &toks[2..];
        let Some((ty, used)) = parse_type(rest, true) else {
            ctx.push(
                codes::E021,
                Severity::Error,
                rest.first().map_or(l.pos(), |t| t.pos),
                format!("invalid type `{}` for field `{name}`", short(rest)),
                Some("types are `string`, `bool`, `int`, `float`, `json` and `string[]` (a schema field may also be `file`)"),
            );
            continue;
        };
        let mut enum_values = Vec::new();
        let mut i = used;
        if let Some((vals, u)) = parse_enum(&rest[i..]) {
            enum_values = vals;
            i += u;
        }
        if i != rest.len() {
            ctx.error(
                codes::E002,
                rest[i].pos,
                format!("unexpected `{}` after the field type", short(&rest[i..])),
            );
        }
        if !seen.insert(name.clone()) {
            ctx.error(codes::E010, l.pos(), format!("duplicate field `{name}`"));
            continue;
        }
        s.fields.push(Field {
            name: name.clone(),
            ty,
            enum_values,
        });
    }
    s
}

pub(crate) fn read_vars(lines: &[Line], ctx: &mut Ctx<'_>, vars: &mut BTreeMap<String, VarDecl>) {
    for l in lines {
        let toks = &l.toks;
        let (Some(Tok::Word(name)), Some(Tok::Colon)) =
            (toks.first().map(|t| &t.tok), toks.get(1).map(|t| &t.tok))
        else {
            ctx.error(
                codes::E001,
                l.pos(),
                format!("expected `name: type [= default]`, found `{}`", short(toks)),
            );
            continue;
        };
        let rest = &toks[2..];
        let Some((ty, used)) = parse_type(rest, false) else {
            ctx.push(
                codes::E021,
                Severity::Error,
                rest.first().map_or(l.pos(), |t| t.pos),
                format!("invalid type `{}` for variable `{name}`", short(rest)),
                Some("types are `string`, `bool`, `int`, `float`, `json` and `string[]`"),
            );
            continue;
        };
        let mut i = used;
        let mut enum_values = None;
        if let Some((vals, u)) = parse_enum(&rest[i..]) {
            if ty != FieldType::String {
                ctx.error(
                    codes::C125,
                    rest[i].pos,
                    format!("enum constraint on non-string variable `{name}`"),
                );
            }
            enum_values = Some(vals);
            i += u;
        }
        let mut default = None;
        if rest.get(i).map(|t| &t.tok) == Some(&Tok::Eq) {
            let dpos = rest.get(i + 1).map_or(rest[i].pos, |t| t.pos);
            match parse_value(&rest[i + 1..]) {
                Ok(PValue::Expr(e)) if e.is_empty() => {
                    ctx.error(codes::E002, dpos, "missing default value after `=`");
                }
                Ok(v) => {
                    if !literal_fits(&v, ty) {
                        ctx.push(
                            codes::C109,
                            Severity::Error,
                            dpos,
                            format!(
                                "default of `{name}` is {} but the variable is declared {}",
                                v.describe(),
                                ty.word()
                            ),
                            Some("fix the default to match the type"),
                        );
                    } else if let (Some(vals), Some(t)) = (&enum_values, v.text())
                        && !vals.iter().any(|x| x == t)
                    {
                        ctx.error(
                            codes::C126,
                            dpos,
                            format!("default `{t}` of `{name}` is not one of its enum values"),
                        );
                    }
                    default = Some(v.to_json());
                }
                Err((p, m)) => ctx.error(codes::E002, p, m),
            }
        } else if i != rest.len() {
            ctx.error(
                codes::E002,
                rest[i].pos,
                format!("unexpected `{}` after the variable type", short(&rest[i..])),
            );
        }
        vars.insert(name.clone(), VarDecl { ty, default });
    }
}

pub(crate) fn literal_fits(v: &PValue, ty: FieldType) -> bool {
    match (ty, v) {
        (FieldType::Json | FieldType::StringArray, _) => true,
        (FieldType::String, PValue::Str(..)) => true,
        (FieldType::String, PValue::Word(_)) => true,
        (FieldType::Bool, PValue::Word(w)) => w == "true" || w == "false",
        (FieldType::Int, PValue::Word(w)) => w.parse::<i64>().is_ok(),
        (FieldType::Float, PValue::Word(w)) => w.parse::<f64>().is_ok(),
        // `${VAR}` forms defer to run time
        (_, PValue::Str(s, _)) => s.contains("${"),
        _ => false,
    }
}

pub(crate) fn read_secrets(lines: &[Line], ctx: &mut Ctx<'_>, out: &mut Vec<SecretDecl>) {
    const SECRET: &[(&str, K)] = &[
        ("value", K::S),
        ("as", K::S),
        ("mount_path", K::S),
        ("env", K::S),
        ("optional", K::B),
        ("hosts", K::L),
        ("egress", K::L),
        ("description", K::S),
    ];
    for l in lines {
        let Some(Tok::Word(name)) = l.toks.first().map(|t| &t.tok) else {
            ctx.error(codes::E001, l.pos(), "expected a secret name");
            continue;
        };
        let props = ctx.props(&l.children, Some(SECRET), "secret");
        let delivery = match props.iter().find(|p| p.key == "as").and_then(Prop::text) {
            Some("file") => SecretDelivery::File,
            _ => SecretDelivery::Env,
        };
        let text = |key: &str| {
            props
                .iter()
                .find(|p| p.key == key)
                .and_then(Prop::text)
                .map(str::to_owned)
        };
        out.push(SecretDecl {
            name: name.clone(),
            delivery,
            value: text("value"),
            mount_path: text("mount_path"),
            env: text("env"),
            optional: text("optional").as_deref() == Some("true"),
            egress: props
                .iter()
                .find(|p| p.key == "egress")
                .map(|p| super::secrets::read_egress(name, p, ctx))
                .unwrap_or_default(),
        });
    }
}
