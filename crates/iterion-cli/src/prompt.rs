//! The terminal prompter of human nodes: shows the node's instructions and
//! input on stderr and reads one line per answer field from stdin.
//!
//! Only installed when stdin is a terminal and `--no-interactive` is not
//! given; otherwise a human node pauses the run (`iterion resume`).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use async_trait::async_trait;
use iterion_runtime::human::{AnswerInput, HumanPrompter, HumanRequest};

/// Reads answers on the controlling terminal.
pub struct TerminalPrompter;

#[async_trait]
impl HumanPrompter for TerminalPrompter {
    async fn ask(&self, request: &HumanRequest) -> Result<BTreeMap<String, AnswerInput>, String> {
        let request = request.clone();
        tokio::task::spawn_blocking(move || ask_blocking(&request))
            .await
            .map_err(|e| format!("the terminal prompt stopped: {e}"))?
    }
}

fn ask_blocking(request: &HumanRequest) -> Result<BTreeMap<String, AnswerInput>, String> {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "\n? human node {} asks:", request.node);
    if let Some(text) = &request.instructions {
        // Run-supplied text: control characters escaped, never sent raw.
        let _ = writeln!(err, "  {}", text.escape_debug());
    }
    // JSON escapes every control character in its strings.
    let _ = writeln!(err, "  input: {}", request.questions);
    let stdin = std::io::stdin();
    let mut answers = BTreeMap::new();
    for (field, ty) in &request.fields {
        let _ = write!(err, "  {field} ({ty}): ");
        let _ = err.flush();
        let mut line = String::new();
        match stdin.lock().read_line(&mut line) {
            Ok(0) => return Err("the terminal closed before every answer was given".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("cannot read the terminal: {e}")),
        }
        let line = line.trim_end_matches(['\n', '\r']).to_owned();
        answers.insert(field.clone(), AnswerInput::Text(line));
    }
    Ok(answers)
}
