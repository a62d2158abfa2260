//! The driver's labelled leftovers: listing every container, network and
//! volume of this store's scope, and removing one idempotently (a second
//! reaper getting there first meets the goal). What is reapable is not
//! decided here (`iterion_sandbox::reaper::reapable` is).

use std::collections::HashMap;

use bollard::query_parameters::{
    ListNetworksOptions, ListVolumesOptions, RemoveContainerOptions, RemoveVolumeOptions,
};
use iterion_core::DriverError;
use iterion_core::driver::{ManagedResource, ResourceKind};

use crate::driver::DockerDriver;
use crate::engine::{engine_err, message_of, status_of};
use crate::firewall;
use crate::labels::{RUN_ID_LABEL, STORE_LABEL, label_filter, owner_of};

impl DockerDriver {
    pub(crate) fn in_scope(&self, labels: Option<&HashMap<String, String>>) -> bool {
        match &self.store_scope {
            None => true,
            Some(scope) => labels.and_then(|l| l.get(STORE_LABEL)) == Some(scope),
        }
    }

    pub(crate) async fn managed(&self) -> Result<Vec<ManagedResource>, DriverError> {
        let mut out = Vec::new();
        for c in crate::rawlist::managed_containers(&self.engine.endpoint).await? {
            if !self.in_scope(c.labels.as_ref()) {
                continue;
            }
            let run_id = c.labels.as_ref().and_then(|l| l.get(RUN_ID_LABEL)).cloned();
            let owner = owner_of(c.labels.as_ref());
            out.push(ManagedResource {
                kind: ResourceKind::Container,
                id: c.id,
                name: c
                    .names
                    .into_iter()
                    .next()
                    .map(|n| n.trim_start_matches('/').to_owned())
                    .unwrap_or_default(),
                run_id: run_id.unwrap_or_default(),
                owner,
            });
        }
        let networks = self
            .engine
            .docker
            .list_networks(Some(ListNetworksOptions {
                filters: Some(label_filter(None)),
            }))
            .await
            .map_err(engine_err("list networks"))?;
        for n in networks {
            if !self.in_scope(n.labels.as_ref()) {
                continue;
            }
            out.push(ManagedResource {
                kind: ResourceKind::Network,
                id: n.id.unwrap_or_default(),
                run_id: n
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(RUN_ID_LABEL))
                    .cloned()
                    .unwrap_or_default(),
                owner: owner_of(n.labels.as_ref()),
                name: n.name.unwrap_or_default(),
            });
        }
        let volumes = self
            .engine
            .docker
            .list_volumes(Some(ListVolumesOptions {
                filters: Some(label_filter(None)),
            }))
            .await
            .map_err(engine_err("list volumes"))?;
        for v in volumes.volumes.into_iter().flatten() {
            if !self.in_scope(Some(&v.labels)) {
                continue;
            }
            out.push(ManagedResource {
                kind: ResourceKind::Volume,
                id: v.name.clone(),
                run_id: v.labels.get(RUN_ID_LABEL).cloned().unwrap_or_default(),
                owner: owner_of(Some(&v.labels)),
                name: v.name,
            });
        }
        Ok(out)
    }

    pub(crate) async fn remove(&self, resource: &ManagedResource) -> Result<(), DriverError> {
        let target = if resource.id.is_empty() {
            resource.name.as_str()
        } else {
            resource.id.as_str()
        };
        let result = match resource.kind {
            ResourceKind::Container => self
                .engine
                .docker
                .remove_container(
                    target,
                    Some(RemoveContainerOptions {
                        force: true,
                        v: true,
                        link: false,
                    }),
                )
                .await
                .map_err(|e| (e, "remove container")),
            ResourceKind::Network => {
                if self.engine.endpoint.is_local() && firewall::nft().is_some() {
                    // The rules are named by the run; a network without the
                    // label is still named `iterion-<run>`.
                    let run = match resource.run_id.as_str() {
                        "" => resource.name.strip_prefix("iterion-").unwrap_or_default(),
                        r => r,
                    };
                    firewall::release(run).await?;
                }
                self.engine
                    .docker
                    .remove_network(target)
                    .await
                    .map_err(|e| (e, "remove network"))
            }
            ResourceKind::Volume => self
                .engine
                .docker
                .remove_volume(target, Some(RemoveVolumeOptions { force: true }))
                .await
                .map_err(|e| (e, "remove volume")),
            // Never listed by an engine driver: the runtime's reaper owns them.
            ResourceKind::HostDir => {
                return Err(DriverError::Unsupported {
                    driver: self.engine.name,
                    feature: "removing host directories",
                });
            }
            // A Kubernetes object: this driver never lists one.
            ResourceKind::Secret => {
                return Err(DriverError::Unsupported {
                    driver: self.engine.name,
                    feature: "removing a Kubernetes Secret",
                });
            }
        };
        match result {
            Ok(()) => Ok(()),
            Err((e, _)) if status_of(&e) == Some(404) => Ok(()),
            // Another reaper pass of the same store (a run's background pass
            // and `iterion sandbox reap`) got there first: the goal is met.
            Err((e, _))
                if status_of(&e) == Some(409) && message_of(&e).contains("already in progress") =>
            {
                Ok(())
            }
            Err((e, op)) => Err(engine_err(op)(e)),
        }
    }
}
