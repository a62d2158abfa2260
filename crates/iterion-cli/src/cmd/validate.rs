//! `iterion validate FILE... [--json]`: parse + compile each file and print
//! its diagnostics (SPEC §2). Exit 0 when no error-severity diagnostic, 1
//! when any, 2 when a file cannot be read. With `--json` the one JSON
//! document goes to stdout and only each file's summary line to stderr: the
//! rendered diagnostics are never built when nothing prints them. Human
//! output is written file by file, so memory follows one file's (bounded)
//! diagnostics, not the whole batch.

use std::io::Write as _;

use crate::cli::ValidateArgs;
use crate::exit::Exit;

/// Entry point of the verb.
pub async fn run(args: ValidateArgs) -> anyhow::Result<Exit> {
    let mut files_json = Vec::new();
    let mut any_error = false;
    let mut unreadable = false;
    let mut human = std::io::stderr().lock();
    let mut report: Box<dyn std::io::Write> = if args.json {
        Box::new(std::io::sink())
    } else {
        Box::new(std::io::stdout().lock())
    };
    for path in &args.files {
        let shown = path.display().to_string();
        let loaded = match crate::workflow::load(path) {
            Ok(l) => l,
            Err(e) => {
                unreadable = true;
                writeln!(human, "error: cannot read {shown}: {e}")?;
                files_json.push(serde_json::json!({
                    "path": shown,
                    "error": e.to_string(),
                    "diagnostics": [],
                }));
                continue;
            }
        };
        let compiled = &loaded.compiled;
        any_error |= compiled.has_errors();
        if !args.json {
            report.write_all(
                iterion_dsl::render_human(&loaded.source, &compiled.diagnostics).as_bytes(),
            )?;
            if let Some(more) = iterion_dsl::render_omitted(compiled.omitted) {
                report.write_all(more.as_bytes())?;
            }
        }
        let kept_errors = compiled
            .diagnostics
            .iter()
            .filter(|d| d.severity == iterion_dsl::Severity::Error)
            .count();
        let errors = kept_errors + compiled.omitted.errors;
        let warnings = compiled.diagnostics.len() - kept_errors + compiled.omitted.warnings;
        let summary = format!(
            "{shown}: {} ({errors} error(s), {warnings} warning(s))",
            if errors == 0 { "ok" } else { "invalid" }
        );
        if args.json {
            writeln!(human, "{summary}")?;
            files_json.push(iterion_dsl::diag::json_file(
                &shown,
                &compiled.diagnostics,
                compiled.omitted,
            ));
        } else {
            writeln!(report, "{summary}")?;
        }
    }
    report.flush()?;
    if args.json {
        let doc = serde_json::json!({ "files": files_json });
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
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
