//! The backends this binary is built with: cargo features of `iterion-cli`
//! (`driver-docker`, `driver-k8s`, `store-postgres`), all on by default,
//! so a build can leave out the heavy dependencies of one it does not
//! need. It owns the one error a verb returns when it is asked for a
//! backend that is not built in ([`NotBuiltIn`]): bad input (exit 2, see
//! `exit.rs`), naming the feature to build with. Which backend a verb
//! needs stays with its factory (`drivers.rs`, `stores.rs`).

use std::fmt;

/// A backend behind a cargo feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The Docker and Podman driver (bollard).
    DriverDocker,
    /// The Kubernetes driver (kube-rs, k8s-openapi).
    DriverK8s,
    /// The PostgreSQL run store (tokio-postgres, deadpool).
    StorePostgres,
}

impl Backend {
    /// The cargo feature that builds it in.
    pub fn feature(self) -> &'static str {
        match self {
            Self::DriverDocker => "driver-docker",
            Self::DriverK8s => "driver-k8s",
            Self::StorePostgres => "store-postgres",
        }
    }

    /// What it is, for a person.
    pub fn what(self) -> &'static str {
        match self {
            Self::DriverDocker => "the Docker/Podman driver",
            Self::DriverK8s => "the Kubernetes driver",
            Self::StorePostgres => "the PostgreSQL run store",
        }
    }

    /// Whether this binary has it.
    pub fn built_in(self) -> bool {
        match self {
            Self::DriverDocker => cfg!(feature = "driver-docker"),
            Self::DriverK8s => cfg!(feature = "driver-k8s"),
            Self::StorePostgres => cfg!(feature = "store-postgres"),
        }
    }
}

/// `Ok` when this binary has `backend`, else the error that says so: what
/// a factory asks before it reaches for a backend.
pub fn require(backend: Backend) -> Result<(), NotBuiltIn> {
    if backend.built_in() {
        Ok(())
    } else {
        Err(NotBuiltIn { backend })
    }
}

/// A verb asked for a backend this binary was built without.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub struct NotBuiltIn {
    /// The backend asked for.
    pub backend: Backend,
}

impl NotBuiltIn {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        "BACKEND_NOT_BUILT_IN"
    }
}

impl fmt::Display for NotBuiltIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is not built into this iterion (cargo feature {}) [{}]",
            self.backend.what(),
            self.backend.feature(),
            self.code()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_names_the_backend_and_its_feature_and_is_bad_input() {
        for backend in [
            Backend::DriverDocker,
            Backend::DriverK8s,
            Backend::StorePostgres,
        ] {
            let msg = NotBuiltIn { backend }.to_string();
            assert!(msg.contains(backend.feature()), "{msg}");
            assert!(msg.contains("[BACKEND_NOT_BUILT_IN]"), "{msg}");
            let outcome: anyhow::Result<crate::exit::Exit> = Err(NotBuiltIn { backend }.into());
            assert_eq!(crate::exit::report(outcome), crate::exit::Exit::BadInput);
            assert_eq!(require(backend).is_ok(), backend.built_in());
        }
        // The default build has every backend.
        #[cfg(all(
            feature = "driver-docker",
            feature = "driver-k8s",
            feature = "store-postgres"
        ))]
        assert!(Backend::StorePostgres.built_in() && Backend::DriverDocker.built_in());
    }
}
