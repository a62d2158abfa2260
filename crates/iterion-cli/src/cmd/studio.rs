//! `iterion studio [--addr HOST:PORT] [--open]`: the web page over the
//! store `ITERION_STORE` names, opened as every store verb opens it
//! (`iterion_studio` does the rest). A non-loopback address without
//! `ITERION_STUDIO_TOKEN` is bad input (exit 2); the token itself is never
//! printed or logged. Serves until SIGINT or SIGTERM.

use std::io::Write as _;

use iterion_studio::{Studio, StudioSettings, TOKEN_ENV};

use crate::cli::StudioArgs;
use crate::exit::{Exit, UserInputError};
use crate::stores;

/// Entry point of the verb.
pub async fn run(args: StudioArgs) -> anyhow::Result<Exit> {
    let token = std::env::var(TOKEN_ENV).ok();
    let settings = StudioSettings::new(args.addr, token.as_deref())
        .map_err(|e| UserInputError::new(format!("{} ({})", e, e.code())))?;
    let guarded = settings.token.is_some();
    let store = stores::open_from_env().await?;
    let studio = Studio::bind(store.clone(), settings)
        .await
        .map_err(|e| anyhow::anyhow!("{e} ({})", e.code()))?;
    let url = studio.url();
    // Not `println!`: a closed stdout must not stop the server.
    let mut out = std::io::stdout();
    let _ = writeln!(out, "iterion studio on {url} (store: {})", store.describe());
    if guarded {
        let _ = writeln!(
            out,
            "the token in {TOKEN_ENV} is required: open {url}login?token=… once, or send `Authorization: Bearer …`"
        );
    }
    let _ = out.flush();
    if args.open {
        open_browser(&url);
    }
    let stop = async {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            // No signal handler: serve until killed.
            _ => std::future::pending::<()>().await,
        }
    };
    studio
        .serve(stop)
        .await
        .map_err(|e| anyhow::anyhow!("{e} ({})", e.code()))?;
    Ok(Exit::Success)
}

/// Best effort: `xdg-open URL` (the URL never carries the token).
fn open_browser(url: &str) {
    match std::process::Command::new("xdg-open")
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        // Reaped on a thread of its own, so no zombie stays behind.
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => eprintln!("warning: cannot open a browser ({e}); open {url} yourself"),
    }
}
