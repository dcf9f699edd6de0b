//! Pod and container security contexts that meet the `restricted` Pod Security Standard.

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};

use crate::api::RuntimeSecurity;
use crate::controller::config::DEFAULT_RUN_AS_USER;

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".to_owned(),
        ..SeccompProfile::default()
    }
}

/// The pod's security context: non-root with the Agent's user (or errand's default), its group
/// owning the volumes, and the runtime's default seccomp profile.
pub fn pod_security(runtime: Option<&RuntimeSecurity>) -> PodSecurityContext {
    let user = runtime
        .and_then(|r| r.run_as_user)
        .unwrap_or(DEFAULT_RUN_AS_USER);
    let group = runtime.and_then(|r| r.run_as_group).unwrap_or(user);
    let fs_group = runtime.and_then(|r| r.fs_group).unwrap_or(group);
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(user),
        run_as_group: Some(group),
        fs_group: Some(fs_group),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..PodSecurityContext::default()
    }
}

/// A container's security context: no privilege escalation, no capabilities, non-root.
/// `read_only_root` is set for errand's own container, which writes only to its volumes.
pub fn container_security(read_only_root: bool) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            ..Capabilities::default()
        }),
        run_as_non_root: Some(true),
        privileged: Some(false),
        read_only_root_filesystem: read_only_root.then_some(true),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..SecurityContext::default()
    }
}
