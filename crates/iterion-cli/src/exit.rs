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
    /// Whether iterion laid the message out over lines itself (see
    /// [`UserInputError::laid_out`]).
    laid_out: bool,
}

impl UserInputError {
    /// Wrap a message. It is printed escaped whole: it may quote a file,
    /// a run or the store (issue 19 #12).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            laid_out: false,
        }
    }

    /// A message iterion laid out over several lines (diagnostics, a
    /// hint): its line breaks are printed as they are, as `iterion
    /// validate` prints them. The caller escaped every part a file, a run
    /// or the store supplied when it put it in
    /// ([`iterion_core::display::printable`]).
    pub fn laid_out(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            laid_out: true,
        }
    }
}

/// One error of a chain as a person reads it: iterion's own line breaks
/// kept, every part a file, a run or the store supplied escaped.
fn shown(e: &(dyn std::error::Error + 'static)) -> String {
    use iterion_core::display::printable;
    if let Some(u) = e.downcast_ref::<UserInputError>()
        && u.laid_out
    {
        return u.message.trim_end().to_owned();
    }
    if let Some(s) = e.downcast_ref::<StoreCliError>() {
        return format!(
            "{} [{}]\n  hint: {}",
            printable(&s.error.to_string()),
            s.code,
            s.hint
        );
    }
    printable(&e.to_string()).into_owned()
}

/// Print an error (with its chain) on stderr and pick the exit code.
pub fn report(outcome: anyhow::Result<Exit>) -> Exit {
    match outcome {
        Ok(exit) => exit,
        Err(err) => {
            let mut chain = err.chain();
            if let Some(top) = chain.next() {
                eprintln!("error: {}", shown(top));
            }
            for cause in chain {
                eprintln!("  caused by: {}", shown(cause));
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

/// A store error for the user: message, stable code, what to do. Its
/// `source` is the store error's cause (the store error itself is already
/// the message), so `caused by:` lines say e.g. "connection refused".
#[derive(Debug)]
pub struct StoreCliError {
    /// The store's error (already in the message, so not a `source`).
    pub error: iterion_core::StoreError,
    /// Its stable code.
    pub code: &'static str,
    /// What to do.
    pub hint: &'static str,
}

impl std::fmt::Display for StoreCliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [{}]\n  hint: {}", self.error, self.code, self.hint)
    }
}

impl std::error::Error for StoreCliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}
