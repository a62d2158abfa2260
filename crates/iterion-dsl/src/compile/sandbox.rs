//! The `sandbox:` block: short form and block form → [`iterion_core::Spec`].
//!
//! Owns C044 (modes, host_state, image XOR build, inline needs a recipe,
//! the dedicated message for a network mode word written as the sandbox
//! mode — facts §2.5 — and a bad `network.mode`/`inherit` word, as
//! upstream's property registry does), C312 (`network:` without `mode:`),
//! C320 (`read_back:` paths, ADR-143) and C313 (a network rule or preset
//! the core grammar, `iterion_core::net`, refuses). A block without
//! `mode:` is `inline` (facts §2.2). Host-side variables stay unexpanded
//! here; [`crate::expand`] does that at run time.

use std::collections::BTreeMap;

use iterion_core::{
    BuildSpec, ContainerPath, HostState, Mode, NetPreset, NetRule, NetworkInherit, NetworkMode,
    NetworkSpec, ReadBackPath, Spec,
};

use super::ctx::Ctx;
use super::props::{K, Prop};
use crate::diag::{Severity, codes};
use crate::ir::{Pos, SandboxDecl};
use crate::parser::{Line, PValue};

const SANDBOX: &[(&str, K)] = &[
    ("mode", K::S),
    ("image", K::S),
    ("build", K::Blk),
    ("user", K::S),
    ("workspace_folder", K::S),
    ("host_state", K::S),
    ("post_create", K::S),
    ("env", K::M),
    ("mounts", K::L),
    ("network", K::Blk),
    ("read_back", K::L),
];
const BUILD: &[(&str, K)] = &[("dockerfile", K::S), ("context", K::S), ("args", K::M)];
const NETWORK: &[(&str, K)] = &[
    ("mode", K::S),
    ("preset", K::S),
    ("inherit", K::S),
    ("rules", K::L),
];

/// Read a `sandbox:` property (workflow or node level).
pub(crate) fn read(p: &Prop<'_>, ctx: &mut Ctx<'_>, _workflow_level: bool) -> Option<SandboxDecl> {
    match &p.value {
        Some(v) => {
            let Some(word) = v.text() else {
                ctx.error(
                    codes::E002,
                    p.value_pos,
                    "`sandbox` expects `auto`, `none`, `inline` or an indented block",
                );
                return None;
            };
            let mode = parse_mode(word, p.value_pos, ctx)?;
            if mode == Mode::Inline {
                inline_needs_recipe(p.value_pos, ctx);
            }
            Some(SandboxDecl {
                spec: Spec::with_mode(mode),
                mode_written: true,
                short_form: true,
                pos: p.value_pos,
            })
        }
        None => block(p.line, p.pos, ctx),
    }
}

fn inline_needs_recipe(pos: Pos, ctx: &mut Ctx<'_>) {
    ctx.push(
        codes::C044,
        Severity::Error,
        pos,
        "inline sandbox needs an `image:` or a `build:`",
        Some("add `image: \"…\"` or a `build:` block, or write `mode: auto` to use the repo devcontainer / default image"),
    );
}

fn parse_mode(word: &str, pos: Pos, ctx: &mut Ctx<'_>) -> Option<Mode> {
    // Only for the hint (facts §2.5): `sandbox: Allowlist` is still C044,
    // but the message points at the `network:` block whatever the case.
    if let Ok(nm) = word.trim().to_ascii_lowercase().parse::<NetworkMode>() {
        ctx.push(
            codes::C044,
            Severity::Error,
            pos,
            format!("`{word}` is a network mode, not a sandbox mode"),
            Some(&format!(
                "egress policy goes in the `network:` sub-block: `sandbox:` → `network:` → `mode: {}`; the sandbox mode is `auto`, `none` or `inline`",
                nm.as_str()
            )),
        );
        return None;
    }
    match word.parse::<Mode>() {
        Ok(m) => Some(m),
        Err(_) => {
            ctx.push(
                codes::C044,
                Severity::Error,
                pos,
                format!("invalid sandbox mode `{word}`"),
                Some("set the sandbox mode to `auto`, `none` or `inline`, or omit it"),
            );
            None
        }
    }
}

fn string_map(p: &Prop<'_>, ctx: &mut Ctx<'_>, what: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    match &p.value {
        Some(PValue::Map(entries)) => {
            for (k, v, pos) in entries {
                match v.text() {
                    Some(t) => {
                        out.insert(k.clone(), t.to_string());
                    }
                    None => ctx.error(codes::E002, *pos, format!("`{what}.{k}` expects a string")),
                }
            }
        }
        _ => {
            for prop in ctx.props(&p.line.children, None, what) {
                match prop.text() {
                    Some(t) => {
                        out.insert(prop.key.clone(), t.to_string());
                    }
                    None => ctx.error(
                        codes::E002,
                        prop.value_pos,
                        format!("`{what}.{}` expects a string", prop.key),
                    ),
                }
            }
        }
    }
    for k in out.keys() {
        if !crate::parser::is_ident(k) {
            ctx.error(
                codes::E002,
                p.pos,
                format!("`{what}` key `{k}` is not an identifier"),
            );
        }
    }
    out
}

pub(crate) fn string_list(p: &Prop<'_>, ctx: &mut Ctx<'_>) -> Vec<(String, Pos)> {
    let mut out = Vec::new();
    if let Some(PValue::List(items)) = &p.value {
        for (v, pos) in items {
            match v.text() {
                Some(t) => out.push((t.to_string(), *pos)),
                None => ctx.error(
                    codes::E002,
                    *pos,
                    format!("`{}` entries must be strings", p.key),
                ),
            }
        }
    }
    out
}

fn block(line: &Line, pos: Pos, ctx: &mut Ctx<'_>) -> Option<SandboxDecl> {
    let props = ctx.props(&line.children, Some(SANDBOX), "sandbox");
    let mut spec = Spec {
        mode: Mode::Inline,
        ..Spec::default()
    };
    let mut mode_written = false;
    let mut mode_ok = true;
    let mut mode_pos = pos;
    for p in &props {
        match p.key.as_str() {
            "mode" => {
                mode_written = true;
                mode_pos = p.value_pos;
                match p.text().and_then(|w| parse_mode(w, p.value_pos, ctx)) {
                    Some(m) => spec.mode = m,
                    None => mode_ok = false,
                }
            }
            "image" => spec.image = p.text().map(str::to_owned),
            "user" => spec.user = p.text().map(str::to_owned),
            "workspace_folder" => {
                let w = p.text().unwrap_or_default();
                // `${localWorkspaceFolder}…` is expanded at run time; the
                // guards judge the expanded path with the same parser.
                if let (false, Err(e)) = (w.starts_with("${"), w.parse::<ContainerPath>()) {
                    ctx.push(
                        codes::C044,
                        Severity::Error,
                        p.value_pos,
                        format!("workspace_folder `{w}`: {}", e.kind),
                        Some("write an absolute path such as \"/workspace\""),
                    );
                }
                spec.workspace_folder = Some(w.to_string());
            }
            "host_state" => match p.text().map(str::parse::<HostState>) {
                Some(Ok(h)) => spec.host_state = Some(h),
                _ => ctx.push(
                    codes::C044,
                    Severity::Error,
                    p.value_pos,
                    format!("invalid host_state `{}`", p.text().unwrap_or_default()),
                    Some("use `auto` or `none`"),
                ),
            },
            "post_create" => spec.post_create = p.text().map(str::to_owned),
            "env" => spec.env = string_map(p, ctx, "env"),
            "mounts" => spec.mounts = string_list(p, ctx).into_iter().map(|(s, _)| s).collect(),
            "build" => {
                let mut b = BuildSpec::default();
                for bp in ctx.props(&p.line.children, Some(BUILD), "sandbox.build") {
                    match bp.key.as_str() {
                        "dockerfile" => b.dockerfile = bp.text().map(str::to_owned),
                        "context" => b.context = bp.text().map(str::to_owned),
                        "args" => b.args = string_map(&bp, ctx, "build.args"),
                        _ => {}
                    }
                }
                spec.build = Some(b);
            }
            "network" => spec.network = Some(network(p, ctx)),
            "read_back" => {
                for (path, ppos) in string_list(p, ctx) {
                    match path.parse::<ReadBackPath>() {
                        Err(e) => ctx.push(
                            codes::C320,
                            Severity::Error,
                            ppos,
                            e.to_string(),
                            Some("declare an absolute, normalized container path outside /proc, /sys and /dev, e.g. \"/workspace/out\""),
                        ),
                        Ok(path) => spec.read_back.push(path),
                    }
                }
            }
            _ => {}
        }
    }
    if mode_ok {
        let has_image = spec.image.as_deref().is_some_and(|i| !i.trim().is_empty());
        if has_image && spec.build.is_some() {
            ctx.push(
                codes::C044,
                Severity::Error,
                pos,
                "sandbox sets both `image:` and `build:`",
                Some("keep exactly one of `image:` or `build:`"),
            );
        } else if spec.mode == Mode::Inline && !spec.names_container() {
            inline_needs_recipe(if mode_written { mode_pos } else { pos }, ctx);
        }
    }
    Some(SandboxDecl {
        spec,
        mode_written,
        short_form: false,
        pos: if mode_written && spec_mode_is_none(&props) {
            mode_pos
        } else {
            pos
        },
    })
}

fn spec_mode_is_none(props: &[Prop<'_>]) -> bool {
    props
        .iter()
        .any(|p| p.key == "mode" && p.text() == Some("none"))
}

fn network(p: &Prop<'_>, ctx: &mut Ctx<'_>) -> NetworkSpec {
    let mut n = NetworkSpec::default();
    let mut mode_written = false;
    for np in ctx.props(&p.line.children, Some(NETWORK), "sandbox.network") {
        mode_written |= np.key == "mode";
        match np.key.as_str() {
            "mode" => match np.text().unwrap_or_default().parse::<NetworkMode>() {
                Ok(m) => n.mode = Some(m),
                Err(e) => ctx.push(
                    codes::C044,
                    Severity::Error,
                    np.value_pos,
                    e.to_string(),
                    Some(&format!("use {}", e.expected)),
                ),
            },
            // An empty preset is no preset, as the proxy always read it.
            "preset" => match np.text().map(str::trim).filter(|t| !t.is_empty()) {
                None => {}
                Some(name) => match name.parse::<NetPreset>() {
                    Ok(preset) => n.preset = Some(preset),
                    Err(e) => ctx.push(
                        codes::C313,
                        Severity::Error,
                        np.value_pos,
                        e.to_string(),
                        None,
                    ),
                },
            },
            "inherit" => match np.text().unwrap_or_default().parse::<NetworkInherit>() {
                Ok(i) => n.inherit = Some(i),
                Err(e) => ctx.push(
                    codes::C044,
                    Severity::Error,
                    np.value_pos,
                    e.to_string(),
                    Some(&format!("use {}", e.expected)),
                ),
            },
            "rules" => {
                for (rule, pos) in string_list(&np, ctx) {
                    match rule.parse::<NetRule>() {
                        Ok(rule) => n.rules.push(rule),
                        Err(e) => ctx.push(codes::C313, Severity::Error, pos, e.to_string(), None),
                    }
                }
            }
            _ => {}
        }
    }
    if !mode_written {
        ctx.push(
            codes::C312,
            Severity::Warning,
            p.pos,
            "`network:` block has no `mode:`: it is inert as written (resolves to open, no proxy)",
            Some("add `mode: allowlist` (or `denylist` / `open`) to the network block"),
        );
    }
    n
}
