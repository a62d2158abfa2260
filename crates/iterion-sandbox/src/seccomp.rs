//! The host-root guard's seccomp profile (issue 19 item 4): what a sandbox
//! that runs as host root on a writable host bind may not do to a file's
//! mode. It owns the transformation of the engines' usual default
//! allowlist into that profile; it does not decide which sandbox gets it
//! (`identity`) nor how an engine is handed it (the driver).
//!
//! Root in its own root-owned checkout runs as root (a checkout read-only
//! to its own agent is no default), so host-root files on the bind are
//! unavoidable; what makes them harmless is that none can be setuid or
//! setgid (this profile), a device (`MKNOD` dropped) or carry file
//! capabilities (`SETFCAP` dropped), and that writing an existing setuid
//! file clears its bit (`FSETID` dropped).
//!
//! The base is containers/common's default profile (`data/seccomp/`,
//! Apache-2.0, NOTICE there), embedded whole so both engines get the same
//! one. Each call that takes a new file's mode — `chmod`, `fchmod`,
//! `fchmodat`, `open`, `openat`, `creat`, `mknod`, `mknodat` — is allowed
//! only when that mode has neither `S_ISUID` nor `S_ISGID` and fails with
//! `EPERM` when it has either (two `SCMP_CMP_MASKED_EQ` rules). Calls whose
//! mode seccomp cannot read — `openat2` (inside a struct), `fchmodat2`
//! (newer than the base) and io_uring (no syscall per operation) — are
//! left to the base's default action (`ENOSYS`), so libc falls back to the
//! filtered calls.

use serde_json::{Value, json};

use crate::error::PolicyError;

/// The base profile, as shipped (see `data/seccomp/NOTICE.md`).
pub const BASE_PROFILE: &str = include_str!("../data/seccomp/containers-common-0.50.1.json");

/// `S_ISUID`.
const SET_UID: u64 = 0o4000;
/// `S_ISGID`.
const SET_GID: u64 = 0o2000;
/// `EPERM`: what a refused mode gets, as a permission check would.
const EPERM: u64 = 1;

/// Each call that sets a file's mode, with the index of its mode argument.
pub const MODE_CALLS: [(&str, u32); 8] = [
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("open", 2),
    ("openat", 3),
    ("creat", 1),
    ("mknod", 1),
    ("mknodat", 2),
];

/// Calls that set a mode seccomp cannot see: never allowed, so they fail
/// with the base's default (`ENOSYS`) and libc uses the calls above.
pub const UNFILTERABLE_CALLS: [&str; 5] = [
    "openat2",
    "fchmodat2",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
];

fn invalid(reason: impl Into<String>) -> PolicyError {
    PolicyError::GuardProfile {
        reason: reason.into(),
    }
}

/// The guard profile as JSON text (the engine's `seccomp=` value, or the
/// file a Podman create names).
pub fn guard_profile() -> Result<String, PolicyError> {
    let base: Value = serde_json::from_str(BASE_PROFILE)
        .map_err(|e| invalid(format!("the embedded base profile is not JSON: {e}")))?;
    let profile = guard_profile_from(base)?;
    serde_json::to_string(&profile).map_err(|e| invalid(e.to_string()))
}

/// Transform a base profile (moby/containers format) into the guard
/// profile. Refused when the base is not a default-deny allowlist: the
/// dropped calls would otherwise stay allowed.
pub fn guard_profile_from(mut base: Value) -> Result<Value, PolicyError> {
    let default_action = base
        .get("defaultAction")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !default_action.starts_with("SCMP_ACT_ERRNO") && default_action != "SCMP_ACT_KILL" {
        return Err(invalid(format!(
            "the base profile's default action is {default_action:?}, not a refusal"
        )));
    }
    let syscalls = base
        .get_mut("syscalls")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| invalid("the base profile has no syscalls list"))?;
    let guarded = |name: &str| {
        MODE_CALLS.iter().any(|(n, _)| *n == name) || UNFILTERABLE_CALLS.contains(&name)
    };
    // Every rule that names a guarded call loses it (an unconditional
    // allow would override any argument filter of the same call), and a
    // rule left naming nothing goes.
    let mut kept = Vec::with_capacity(syscalls.len() + MODE_CALLS.len() * 3);
    for mut rule in syscalls.drain(..) {
        let names = rule
            .get_mut("names")
            .and_then(Value::as_array_mut)
            .ok_or_else(|| invalid("a base rule has no names list"))?;
        names.retain(|n| !n.as_str().is_some_and(guarded));
        if !names.is_empty() {
            kept.push(rule);
        }
    }
    for (name, index) in MODE_CALLS {
        let masked = |mask: u64, value: u64| json!([{ "index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ" }]);
        kept.push(json!({
            "names": [name],
            "action": "SCMP_ACT_ALLOW",
            "args": masked(SET_UID | SET_GID, 0),
        }));
        for bit in [SET_UID, SET_GID] {
            kept.push(json!({
                "names": [name],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": EPERM,
                "args": masked(bit, bit),
            }));
        }
    }
    *syscalls = kept;
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules_naming(profile: &Value, name: &str) -> Vec<Value> {
        profile["syscalls"]
            .as_array()
            .expect("syscalls")
            .iter()
            .filter(|r| {
                r["names"]
                    .as_array()
                    .expect("names")
                    .iter()
                    .any(|n| n == name)
            })
            .cloned()
            .collect()
    }

    #[test]
    fn mode_calls_are_allowed_only_without_setuid_or_setgid() {
        let profile: Value =
            serde_json::from_str(&guard_profile().expect("profile")).expect("json");
        for (name, index) in MODE_CALLS {
            let rules = rules_naming(&profile, name);
            assert_eq!(rules.len(), 3, "{name}: {rules:#?}");
            assert_eq!(rules[0]["action"], "SCMP_ACT_ALLOW");
            assert_eq!(rules[0]["args"][0]["index"], index);
            assert_eq!(rules[0]["args"][0]["value"], 0o6000);
            assert_eq!(rules[0]["args"][0]["valueTwo"], 0);
            for (rule, bit) in rules[1..].iter().zip([0o4000, 0o2000]) {
                assert_eq!(rule["action"], "SCMP_ACT_ERRNO");
                assert_eq!(rule["errnoRet"], 1);
                assert_eq!(rule["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
                assert_eq!(rule["args"][0]["value"], bit);
                assert_eq!(rule["args"][0]["valueTwo"], bit);
            }
        }
        for name in UNFILTERABLE_CALLS {
            assert!(rules_naming(&profile, name).is_empty(), "{name}");
        }
        // The rest of the allowlist is the base's.
        assert!(!rules_naming(&profile, "read").is_empty());
        assert_eq!(profile["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(profile["defaultErrnoRet"], 38);
    }

    #[test]
    fn an_unconditional_allow_of_a_mode_call_is_removed() {
        let base = json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "syscalls": [
                { "names": ["chmod", "read", "openat2"], "action": "SCMP_ACT_ALLOW" },
                { "names": ["fchmod"], "action": "SCMP_ACT_ALLOW", "includes": { "caps": ["CAP_FOWNER"] } },
                { "names": ["io_uring_setup"], "action": "SCMP_ACT_ALLOW" }
            ]
        });
        let out = guard_profile_from(base).expect("transformed");
        let first = &out["syscalls"][0];
        assert_eq!(first["names"], json!(["read"]));
        assert_eq!(rules_naming(&out, "chmod").len(), 3);
        assert_eq!(rules_naming(&out, "fchmod").len(), 3);
        assert!(rules_naming(&out, "io_uring_setup").is_empty());
        assert!(rules_naming(&out, "openat2").is_empty());
    }

    #[test]
    fn a_default_allow_base_is_refused() {
        for base in [
            json!({ "defaultAction": "SCMP_ACT_ALLOW", "syscalls": [] }),
            json!({ "defaultAction": "SCMP_ACT_ERRNO" }),
            json!({ "defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{ "action": "SCMP_ACT_ALLOW" }] }),
        ] {
            let err = guard_profile_from(base).expect_err("refused");
            assert_eq!(err.code(), "SANDBOX_GUARD_PROFILE_INVALID");
        }
    }

    #[test]
    fn the_guard_profile_is_golden() {
        let profile: Value =
            serde_json::from_str(&guard_profile().expect("profile")).expect("json");
        insta::assert_json_snapshot!("guard_profile", profile);
    }
}
