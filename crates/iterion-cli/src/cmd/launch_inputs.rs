//! What `iterion run` takes from the user besides `--var`: `--preset NAME`
//! (an in-source `presets:` entry applied under `--var`, as upstream's
//! `buildRunInputs`) and `--attach NAME=PATH` (checked by
//! `iterion_runtime::attachments`, the one home of that check, before
//! anything is created). Bad input here is exit 2.

use std::collections::BTreeMap;

use iterion_dsl::ir::Workflow;
use iterion_runtime::attachments::{LaunchAttachment, check_launch};
use iterion_runtime::template::value_text;

use crate::exit::UserInputError;

/// The variables of a launch: the preset's values (when named), then
/// `--var` over them.
pub(super) fn run_vars(
    workflow: &Workflow,
    preset: Option<&str>,
    vars: BTreeMap<String, String>,
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    if let Some(name) = preset {
        let Some(values) = workflow.presets.get(name) else {
            let available: Vec<&str> = workflow.presets.keys().map(String::as_str).collect();
            let why = if available.is_empty() {
                "the workflow declares no presets".to_owned()
            } else {
                format!("unknown preset (available: {})", available.join(", "))
            };
            return Err(UserInputError::new(format!("--preset {name:?}: {why}")).into());
        };
        out.extend(values.iter().map(|(k, v)| (k.clone(), value_text(v))));
    }
    out.extend(vars);
    Ok(out)
}

/// The launch's `--attach` arguments, parsed and checked against the
/// workflow's declarations.
pub(super) fn attachments(
    workflow: &Workflow,
    raw: &[String],
) -> anyhow::Result<Vec<LaunchAttachment>> {
    let bad = |e: iterion_runtime::attachments::AttachmentError| {
        UserInputError::new(format!("{e} [{}]", e.code()))
    };
    let given = raw
        .iter()
        .map(|a| LaunchAttachment::parse(a))
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    check_launch(workflow, &given).map_err(bad)?;
    Ok(given)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workflow() -> Workflow {
        let src = "vars:\n  who: string = \"world\"\n  n: int = 1\n\npresets:\n  loud:\n    who: \"WORLD\"\n    n: 3\n\nworkflow w:\n  entry: a\n  a -> done\ntool a:\n  command: \"echo {{vars.who}}\"\n";
        let compiled = iterion_dsl::compile_source(src, std::path::Path::new("w.iter"));
        assert!(!compiled.has_errors(), "{:?}", compiled.diagnostics);
        compiled.workflows.into_iter().next().expect("workflow")
    }

    #[test]
    fn a_preset_applies_under_var() {
        let w = workflow();
        let vars = run_vars(&w, Some("loud"), BTreeMap::new()).expect("preset");
        assert_eq!(vars["who"], "WORLD");
        assert_eq!(vars["n"], "3");
        let over = BTreeMap::from([("who".to_owned(), "me".to_owned())]);
        let vars = run_vars(&w, Some("loud"), over).expect("preset + var");
        assert_eq!(vars["who"], "me");
        assert_eq!(vars["n"], "3");
        assert!(
            run_vars(&w, None, BTreeMap::new())
                .expect("none")
                .is_empty()
        );
    }

    #[test]
    fn an_unknown_preset_names_the_available_ones() {
        let w = workflow();
        let e = run_vars(&w, Some("quiet"), BTreeMap::new()).expect_err("unknown");
        assert!(e.downcast_ref::<UserInputError>().is_some());
        assert!(e.to_string().contains("available: loud"), "{e}");
        let mut bare = w.clone();
        bare.presets.clear();
        let e = run_vars(&bare, Some("loud"), BTreeMap::new()).expect_err("none");
        assert!(e.to_string().contains("declares no presets"), "{e}");
    }

    #[test]
    fn a_bad_attachment_is_user_input() {
        let w = workflow();
        let e = attachments(&w, &["x=/nonexistent".to_owned()]).expect_err("undeclared");
        assert!(e.downcast_ref::<UserInputError>().is_some());
        assert!(e.to_string().contains("ATTACHMENT_UNDECLARED"), "{e}");
        let e = attachments(&w, &["nothing".to_owned()]).expect_err("syntax");
        assert!(e.to_string().contains("NAME=PATH"), "{e}");
    }
}
