//! The one exit-code table of the `iterion` command (`docs/reference/SPEC.md` §2).
//!
//! | code | meaning |
//! |------|---------|
//! | 0 | success |
//! | 1 | the thing checked or run failed (a failed/refused run, an error diagnostic, a failed doctor check) |
//! | 2 | bad input: unreadable file, bad flag, invalid workflow for `run`, strict pre-flight failure, a backend this binary is built without |
//!
//! clap's own usage errors also exit 2.

/// Process outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0.
    Success,
    /// 1.
    Failure,
    /// 2.
    BadInput,
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        match e {
            Exit::Success => Self::SUCCESS,
            Exit::Failure => Self::from(1),
            Exit::BadInput => Self::from(2),
        }
    }
}

/// An error that carries its exit class (bad input vs failure).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct UserInputError {
    /// What was wrong.
    pub message: String,
}

impl UserInputError {
    /// Wrap a message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// Print an error (with its chain) on stderr and pick the exit code.
pub fn report(outcome: anyhow::Result<Exit>) -> Exit {
    match outcome {
        Ok(exit) => exit,
        Err(err) => {
            // Errors quote input and store content: printed escaped.
            let show = |e: &dyn std::fmt::Display| {
                iterion_core::display::printable(&e.to_string()).into_owned()
            };
            eprintln!("error: {}", show(&err));
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {}", show(&cause));
            }
            // Asking for a backend this build lacks is bad input too: the
            // configuration names something this binary cannot do.
            if err.downcast_ref::<UserInputError>().is_some()
                || err.downcast_ref::<crate::backends::NotBuiltIn>().is_some()
            {
                Exit::BadInput
            } else {
                Exit::Failure
            }
        }
    }
}
