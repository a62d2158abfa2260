//! One edge line (`a -> b -> c when x as loop(N) with {…}`) → [`EdgeLine`]:
//! clause syntax (E001/E002/E030/E031), loop bounds (C026). Owns no rule
//! that needs other edges or the node set.

use std::collections::BTreeMap;

use crate::diag::{Severity, codes};
use crate::ir::{Condition, ForEach, LoopBound, Pos};
use crate::lexer::Tok;
use crate::parser::{Line, PValue, is_ident, parse_value};

use super::ctx::{Ctx, short};

/// A parsed edge line.
pub(crate) struct EdgeLine {
    pub(crate) chain: Vec<(String, Pos)>,
    pub(crate) cond: Option<(Condition, Pos)>,
    pub(crate) is_else: bool,
    pub(crate) loop_bound: Option<(LoopBound, Pos, bool)>,
    pub(crate) foreach: Option<ForEach>,
    pub(crate) with: BTreeMap<String, String>,
    pub(crate) pos: Pos,
}

pub(crate) fn parse_edge(line: &Line, prefix: Option<&str>, ctx: &mut Ctx<'_>) -> Option<EdgeLine> {
    let toks = &line.toks;
    let pos = line.pos();
    let mut chain = Vec::new();
    let mut i = 0;
    loop {
        match toks.get(i).map(|t| &t.tok) {
            Some(Tok::Word(w)) if w.split('.').all(is_ident) => {
                let name = match prefix {
                    Some(p) if w != "done" && w != "fail" => format!("{p}.{w}"),
                    _ => w.clone(),
                };
                chain.push((name, toks[i].pos));
                i += 1;
            }
            _ => {
                ctx.push(
                    codes::E002,
                    Severity::Error,
                    toks.get(i).map_or(pos, |t| t.pos),
                    "expected a node name in the edge",
                    Some("An edge is `src -> dst`, optionally followed by `when …`, `else`, `as name(N)` or `with { … }`."),
                );
                return None;
            }
        }
        if toks.get(i).map(|t| &t.tok) == Some(&Tok::Arrow) {
            i += 1;
        } else {
            break;
        }
    }
    if chain.len() < 2 {
        ctx.error(codes::E002, pos, "an edge needs `->` and a target");
        return None;
    }
    let mut e = EdgeLine {
        chain,
        cond: None,
        is_else: false,
        loop_bound: None,
        foreach: None,
        with: BTreeMap::new(),
        pos,
    };
    let mut seen_with = false;
    while i < toks.len() {
        let cpos = toks[i].pos;
        let Tok::Word(kw) = &toks[i].tok else {
            ctx.error(
                codes::E001,
                cpos,
                format!("unexpected `{}` in edge", short(&toks[i..i + 1])),
            );
            return None;
        };
        match kw.as_str() {
            "when" => {
                if e.cond.is_some() {
                    ctx.error(codes::E030, cpos, "duplicate `when` clause");
                }
                if e.is_else {
                    ctx.error(
                        codes::E031,
                        cpos,
                        "an edge cannot carry both `when` and `else`",
                    );
                }
                i += 1;
                let mut negated = false;
                if matches!(toks.get(i).map(|t| &t.tok), Some(Tok::Word(w)) if w == "not") {
                    negated = true;
                    i += 1;
                }
                match toks.get(i).map(|t| &t.tok) {
                    Some(Tok::Word(f)) if is_ident(f) => {
                        e.cond = Some((
                            Condition::Field {
                                field: f.clone(),
                                negated,
                            },
                            toks[i].pos,
                        ));
                    }
                    Some(Tok::Str(s, _)) if !negated => {
                        let spos = toks[i].pos;
                        // parsed here so a bad expression is C040 at its
                        // column, not a surprise at run time; the engine
                        // parses the same text with the same parser
                        if let Err(err) = crate::expr::Expr::parse(s) {
                            let at = err.offset().unwrap_or(0);
                            ctx.push(
                                codes::C040,
                                Severity::Error,
                                Pos {
                                    line: spos.line,
                                    column: spos
                                        .column
                                        .saturating_add(1)
                                        .saturating_add(u32::try_from(at).unwrap_or(u32::MAX)),
                                },
                                format!("invalid `when` expression: {err}"),
                                Some("operators: || && ! == != < <= > >= + - * / %, functions: length, concat, unique, contains, join, if"),
                            );
                        }
                        e.cond = Some((Condition::Expr(s.clone()), spos));
                    }
                    _ => {
                        ctx.error(
                            codes::E002,
                            toks.get(i).map_or(cpos, |t| t.pos),
                            "expected a field name or a quoted expression after `when`",
                        );
                        return None;
                    }
                }
                i += 1;
            }
            "else" => {
                if e.cond.is_some() {
                    ctx.error(
                        codes::E031,
                        cpos,
                        "an edge cannot carry both `when` and `else`",
                    );
                }
                e.is_else = true;
                i += 1;
            }
            "as" => {
                if e.loop_bound.is_some() || e.foreach.is_some() {
                    ctx.error(codes::E030, cpos, "duplicate `as` clause");
                }
                i += 1;
                let name = match toks.get(i).map(|t| &t.tok) {
                    Some(Tok::Word(n)) if is_ident(n) => n.clone(),
                    _ => {
                        ctx.error(
                            codes::E002,
                            toks.get(i).map_or(cpos, |t| t.pos),
                            "expected a loop name after `as`",
                        );
                        return None;
                    }
                };
                i += 1;
                if name == "foreach" {
                    // foreach NAME ( ITEM in "collection" )
                    let parsed = (|| {
                        let Tok::Word(lname) = &toks.get(i)?.tok else {
                            return None;
                        };
                        if toks.get(i + 1)?.tok != Tok::LParen {
                            return None;
                        }
                        let Tok::Word(item) = &toks.get(i + 2)?.tok else {
                            return None;
                        };
                        let Tok::Word(inw) = &toks.get(i + 3)?.tok else {
                            return None;
                        };
                        if inw != "in" {
                            return None;
                        }
                        let Tok::Str(coll, _) = &toks.get(i + 4)?.tok else {
                            return None;
                        };
                        if toks.get(i + 5)?.tok != Tok::RParen {
                            return None;
                        }
                        Some(ForEach {
                            name: lname.clone(),
                            item: item.clone(),
                            collection: coll.clone(),
                        })
                    })();
                    match parsed {
                        Some(f) => {
                            e.foreach = Some(f);
                            i += 6;
                        }
                        None => {
                            ctx.error(
                                codes::E002,
                                cpos,
                                "expected `as foreach NAME(ITEM in \"collection\")`",
                            );
                            return None;
                        }
                    }
                    continue;
                }
                if toks.get(i).map(|t| &t.tok) != Some(&Tok::LParen) {
                    ctx.push(
                        codes::E002,
                        Severity::Error,
                        toks.get(i).map_or(cpos, |t| t.pos),
                        format!("expected `(` after loop name `{name}`"),
                        Some("write `as name(N)` with N the maximum iterations"),
                    );
                    return None;
                }
                i += 1;
                let cap_pos = toks.get(i).map_or(cpos, |t| t.pos);
                let mut unbounded = false;
                let mut max: Option<i64> = None;
                let mut deferred = false;
                loop {
                    match toks.get(i).map(|t| &t.tok) {
                        Some(Tok::RParen) => {
                            i += 1;
                            break;
                        }
                        Some(Tok::Word(w)) if w == "unbounded" => unbounded = true,
                        Some(Tok::Word(w)) => match w.parse::<i64>() {
                            Ok(n) => max = Some(n),
                            Err(_) => {
                                ctx.error(
                                    codes::E002,
                                    toks[i].pos,
                                    format!("invalid loop bound `{w}`"),
                                );
                                return None;
                            }
                        },
                        Some(Tok::Punct('-')) => {
                            ctx.error(
                                codes::C026,
                                toks[i].pos,
                                format!("loop `{name}` has a negative iteration bound"),
                            );
                            return None;
                        }
                        Some(Tok::Str(..)) => deferred = true,
                        _ => {
                            ctx.error(codes::E002, cap_pos, "unclosed loop bound `(`");
                            return None;
                        }
                    }
                    i += 1;
                }
                if !unbounded && !deferred && max.is_none() {
                    ctx.error(
                        codes::E002,
                        cap_pos,
                        format!("loop `{name}` has no iteration bound"),
                    );
                    return None;
                }
                if !unbounded && !deferred && max.is_some_and(|m| m < 1) {
                    ctx.push(
                        codes::C026,
                        Severity::Error,
                        cap_pos,
                        format!("loop `{name}` allows fewer than 1 iteration"),
                        Some("set max_iterations to at least 1"),
                    );
                }
                let fuel_given = max.is_some();
                let m = max.map_or(u32::MAX, |m| u32::try_from(m.max(0)).unwrap_or(u32::MAX));
                e.loop_bound = Some((
                    LoopBound {
                        name,
                        max: m,
                        unbounded,
                    },
                    cpos,
                    unbounded && !fuel_given,
                ));
            }
            "with" => {
                if seen_with {
                    ctx.error(codes::E030, cpos, "duplicate `with` clause");
                }
                seen_with = true;
                i += 1;
                if toks.get(i).map(|t| &t.tok) != Some(&Tok::LBrace) {
                    ctx.error(
                        codes::E002,
                        toks.get(i).map_or(cpos, |t| t.pos),
                        "expected `{` after `with`",
                    );
                    return None;
                }
                let start = i;
                let mut depth = 0usize;
                while i < toks.len() {
                    match toks[i].tok {
                        Tok::LBrace => depth += 1,
                        Tok::RBrace => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                match parse_value(&toks[start..(i + 1).min(toks.len())]) {
                    Ok(PValue::Map(entries)) => {
                        for (k, v, _) in entries {
                            let s = match v {
                                PValue::Str(s, _) | PValue::Word(s) | PValue::Expr(s) => s,
                                other => other.to_json().to_string(),
                            };
                            e.with.insert(k, s);
                        }
                    }
                    Ok(_) => {}
                    Err((p, m)) => {
                        ctx.error(codes::E002, if p.line == 0 { cpos } else { p }, m);
                        return None;
                    }
                }
                i += 1;
            }
            other => {
                ctx.push(codes::E001, Severity::Error, cpos, format!("unexpected `{other}` in edge"), Some("An edge is `src -> dst`, optionally followed by `when …`, `else`, `as name(N)` or `with { … }`."));
                return None;
            }
        }
    }
    Some(e)
}

/// Position of each IR edge's condition (parallel to the edges built from
/// `edge_lines`), used to point C013/C014 at the field.
pub(crate) fn edge_positions(edge_lines: &[EdgeLine]) -> Vec<Option<Pos>> {
    let mut out = Vec::new();
    for e in edge_lines {
        for k in 0..e.chain.len().saturating_sub(1) {
            let last = k + 2 == e.chain.len();
            out.push(if last {
                e.cond.as_ref().map(|c| c.1)
            } else {
                None
            });
        }
    }
    out
}
