//! `iterion validate FILE... [--json]`: parse + compile each file and print
//! its diagnostics (SPEC §2). Exit 0 when no error-severity diagnostic, 1
//! when any, 2 when a file cannot be read. With `--json` the one JSON
//! document goes to stdout and human text to stderr.

use std::io::Write as _;

use crate::cli::ValidateArgs;
use crate::exit::Exit;

/// Entry point of the verb.
pub async fn run(args: ValidateArgs) -> anyhow::Result<Exit> {
    let mut files_json = Vec::new();
    let mut any_error = false;
    let mut unreadable = false;
    let mut human = String::new();
    for path in &args.files {
        let shown = path.display().to_string();
        let source = match std::fs::read(path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => {
                unreadable = true;
                human.push_str(&format!("error: cannot read {shown}: {e}\n"));
                files_json.push(serde_json::json!({
                    "path": shown,
                    "error": e.to_string(),
                    "diagnostics": [],
                }));
                continue;
            }
        };
        let compiled = crate::workflow::load(path)?.compiled;
        any_error |= compiled.has_errors();
        human.push_str(&iterion_dsl::render_human(&source, &compiled.diagnostics));
        let errors = compiled
            .diagnostics
            .iter()
            .filter(|d| d.severity == iterion_dsl::Severity::Error)
            .count();
        let warnings = compiled.diagnostics.len() - errors;
        human.push_str(&format!(
            "{shown}: {} ({errors} error(s), {warnings} warning(s))\n",
            if errors == 0 { "ok" } else { "invalid" }
        ));
        files_json.push(iterion_dsl::diag::json_file(&shown, &compiled.diagnostics));
    }
    if args.json {
        let doc = serde_json::json!({ "files": files_json });
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        eprint!("{human}");
    } else {
        print!("{human}");
    }
    Ok(if unreadable {
        Exit::BadInput
    } else if any_error {
        Exit::Failure
    } else {
        Exit::Success
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(files: Vec<std::path::PathBuf>, json: bool) -> ValidateArgs {
        ValidateArgs { files, json }
    }

    #[tokio::test]
    async fn exit_codes_follow_the_contract() {
        let dir = std::env::temp_dir().join(format!("iterion-validate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.iter");
        std::fs::write(
            &good,
            "tool a:\n  command: \"true\"\n\nworkflow w:\n  entry: a\n  a -> done\n",
        )
        .unwrap();
        let warn = dir.join("warn.iter");
        std::fs::write(
            &warn,
            "tool a:\n  command: \"true\"\n\nworkflow w:\n  sandbox: none\n  entry: a\n  a -> done\n",
        )
        .unwrap();
        let bad = dir.join("bad.iter");
        std::fs::write(&bad, "tool a:\n  command: \"true\"\n\nworkflow w:\n  sandbox: allowlist\n  entry: a\n  a -> done\n")
            .unwrap();
        let missing = dir.join("missing.iter");

        assert_eq!(
            run(args(vec![good.clone()], false)).await.unwrap(),
            Exit::Success
        );
        assert_eq!(
            run(args(vec![warn.clone()], true)).await.unwrap(),
            Exit::Success
        );
        assert_eq!(
            run(args(vec![good.clone(), bad.clone()], true))
                .await
                .unwrap(),
            Exit::Failure
        );
        assert_eq!(
            run(args(vec![bad, missing], false)).await.unwrap(),
            Exit::BadInput
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
