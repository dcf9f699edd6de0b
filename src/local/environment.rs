//! What a local agent's environment starts from: what a pod gets from its image (`PATH`, `HOME`, `LANG`, `TZ`), not everything the caller exported, unless the caller opts in.

use crate::resolve::is_reserved_env;

/// This process's environment, the variables that are text.
pub(super) fn caller_environment() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// What a local agent gets from the machine, as a pod gets its image's: `PATH`, `HOME`, `LANG`
/// and `TZ` from the caller (`PATH` falls back to the usual system directories), or, when the
/// user asks for it, the caller's whole environment but errand's own variables.
pub(super) fn base_environment(
    caller: &[(String, String)],
    inherit: bool,
) -> Vec<(String, String)> {
    const PASSED: [&str; 4] = ["PATH", "HOME", "LANG", "TZ"];
    const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
    let mut env: Vec<(String, String)> = caller
        .iter()
        .filter(|(name, _)| {
            if inherit {
                !is_reserved_env(name)
            } else {
                PASSED.contains(&name.as_str())
            }
        })
        .cloned()
        .collect();
    if !env.iter().any(|(name, _)| name == "PATH") {
        env.push(("PATH".to_owned(), DEFAULT_PATH.to_owned()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::base_environment;

    fn names(env: &[(String, String)]) -> Vec<&str> {
        env.iter().map(|(name, _)| name.as_str()).collect()
    }

    #[test]
    fn an_agent_gets_path_home_lang_and_tz_unless_the_caller_opts_in() {
        let caller: Vec<(String, String)> = [
            ("PATH", "/opt/bin:/usr/bin"),
            ("HOME", "/home/u"),
            ("LANG", "C.UTF-8"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("ERRAND_HOME", "/data"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        assert_eq!(
            names(&base_environment(&caller, false)),
            ["PATH", "HOME", "LANG"]
        );
        assert_eq!(
            names(&base_environment(&caller, true)),
            ["PATH", "HOME", "LANG", "AWS_SECRET_ACCESS_KEY"],
            "errand's own variables never pass"
        );
        assert_eq!(
            base_environment(&[], false),
            [("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())]
        );
    }
}
