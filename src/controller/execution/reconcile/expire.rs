//! Expire: a finished execution whose lifetime ran out is deleted, in the foreground, so its results and children go with it before it does.

use std::time::Duration;

use jiff::Timestamp;
use kube::api::{DeleteParams, Preconditions};
use tracing::info;

use super::Reconciler;
use crate::controller::error::{Error, Result};
use crate::retention::ttl::{self, Retention};

impl Reconciler<'_> {
    /// Deletes a finished execution whose lifetime ran out; returns when to look again (when
    /// it runs out), `None` when there is nothing to wait for.
    ///
    /// The deletion is the one `errand delete` makes: foreground, so the snapshot ConfigMap's
    /// results finalizer deletes the results before the execution disappears; and only of
    /// this uid, so a new execution of the same name is never taken for the old one.
    pub(super) async fn retain(&self) -> Result<Option<Duration>> {
        let lifetime = ttl::lifetime(
            self.execution.spec.ttl_seconds_after_finished,
            self.ctx.namespace_lifetime(&self.owner.namespace),
            self.ctx.config.default_ttl_seconds_after_finished,
        );
        let (finished, lifetime) = match ttl::decide(self.execution, lifetime, Timestamp::now()) {
            Retention::Kept => return Ok(None),
            Retention::RecheckIn(after) => return Ok(Some(after + Duration::from_secs(1))),
            Retention::Expired { finished, lifetime } => (finished, lifetime),
        };
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(self.owner.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::foreground()
        };
        match self.api.delete(&self.owner.name, &params).await {
            Ok(_) => {}
            // Gone already, or the name belongs to a newer execution now.
            Err(kube::Error::Api(status)) if status.is_not_found() || status.code == 409 => {
                return Ok(None);
            }
            Err(e) => {
                return Err(Error::kube(format!(
                    "deleting expired execution {}",
                    self.owner.name
                ))(e));
            }
        }
        self.ctx.metrics.expired(lifetime.source.as_str());
        info!(
            execution = %self.owner.name,
            namespace = %self.owner.namespace,
            finished = %finished,
            ttl_seconds = lifetime.seconds,
            set_by = lifetime.source.as_str(),
            "deleted: its lifetime after finishing ran out"
        );
        Ok(None)
    }
}
