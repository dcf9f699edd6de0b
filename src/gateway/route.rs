//! What a gateway request asks for, from its method and path: which deployment (by name, or the agent's active one), and what to do with it.
//!
//! Pure. Every path is under `/v1/namespaces/<namespace>/`, then `deployments/<name>/` or
//! `agents/<agent>/`, then one of `invoke`, `chat`, `sessions`, `sessions/<session>`,
//! `v1/chat/completions`, `v1/models` or `v1/models/<model>` (so an OpenAI client's base URL is
//! `.../agents/<agent>/v1`).

use hyper::Method;

/// Which deployment a request is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// One deployment, by name.
    Deployment(String),
    /// The active deployment of an agent: its Ready deployment (the newest, when several).
    Agent(String),
}

/// What a request does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `POST invoke`: one request, passed to the agent server's `/invoke`.
    Invoke,
    /// `POST chat`: one turn of a named session.
    Chat,
    /// `GET sessions`: the sessions of the deployment.
    Sessions,
    /// `GET sessions/<name>`: one session's turns, to resume it.
    Session(String),
    /// `POST v1/chat/completions`: OpenAI's chat completions, passed through (streams too).
    ChatCompletions,
    /// `GET v1/models`: OpenAI's model list, the one model the path names.
    Models,
    /// `GET v1/models/<model>`: one model of that list.
    Model(String),
}

/// A request the gateway serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The namespace.
    pub namespace: String,
    /// The deployment or agent.
    pub target: Target,
    /// What to do.
    pub action: Action,
}

/// Why a path is not a gateway request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoRoute {
    /// No such path (404).
    NotFound,
    /// The path exists, not with this method (405); the allowed one.
    Method(&'static str),
}

/// The route of `method path`.
pub fn route(method: &Method, path: &str) -> Result<Route, NoRoute> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let ["", "v1", "namespaces", namespace, kind, name, rest @ ..] = segments.as_slice() else {
        return Err(NoRoute::NotFound);
    };
    if namespace.is_empty() || name.is_empty() {
        return Err(NoRoute::NotFound);
    }
    let target = match *kind {
        "deployments" => Target::Deployment((*name).to_owned()),
        "agents" => Target::Agent((*name).to_owned()),
        _ => return Err(NoRoute::NotFound),
    };
    let (action, allowed) = match rest {
        ["invoke"] => (Action::Invoke, Method::POST),
        ["chat"] => (Action::Chat, Method::POST),
        ["sessions"] => (Action::Sessions, Method::GET),
        ["sessions", session] if !session.is_empty() => {
            (Action::Session((*session).to_owned()), Method::GET)
        }
        ["v1", "chat", "completions"] => (Action::ChatCompletions, Method::POST),
        ["v1", "models"] => (Action::Models, Method::GET),
        ["v1", "models", model] if !model.is_empty() => {
            (Action::Model((*model).to_owned()), Method::GET)
        }
        _ => return Err(NoRoute::NotFound),
    };
    if *method != allowed {
        return Err(NoRoute::Method(if allowed == Method::POST {
            "POST"
        } else {
            "GET"
        }));
    }
    Ok(Route {
        namespace: (*namespace).to_owned(),
        target,
        action,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_namespace_the_target_and_the_action() {
        let invoke = route(
            &Method::POST,
            "/v1/namespaces/team-a/deployments/calc/invoke",
        )
        .unwrap();
        assert_eq!(
            invoke,
            Route {
                namespace: "team-a".into(),
                target: Target::Deployment("calc".into()),
                action: Action::Invoke,
            }
        );
        let openai = route(
            &Method::POST,
            "/v1/namespaces/team-a/agents/calculator/v1/chat/completions",
        )
        .unwrap();
        assert_eq!(openai.target, Target::Agent("calculator".into()));
        assert_eq!(openai.action, Action::ChatCompletions);
        let session = route(&Method::GET, "/v1/namespaces/a/deployments/b/sessions/s1").unwrap();
        assert_eq!(session.action, Action::Session("s1".into()));
        let models = route(&Method::GET, "/v1/namespaces/a/agents/calc/v1/models").unwrap();
        assert_eq!(models.action, Action::Models);
        let model = route(&Method::GET, "/v1/namespaces/a/agents/calc/v1/models/calc").unwrap();
        assert_eq!(model.action, Action::Model("calc".into()));
        assert_eq!(
            route(&Method::POST, "/v1/namespaces/a/agents/calc/v1/models"),
            Err(NoRoute::Method("GET"))
        );
    }

    #[test]
    fn other_paths_and_methods_are_refused() {
        assert_eq!(
            route(&Method::GET, "/v1/namespaces/a/deployments/b/invoke"),
            Err(NoRoute::Method("POST"))
        );
        for path in [
            "/",
            "/v1/namespaces/a/pods/b/invoke",
            "/v1/namespaces/a/deployments/b/exec",
            "/v1/namespaces//deployments/b/invoke",
        ] {
            assert_eq!(route(&Method::POST, path), Err(NoRoute::NotFound), "{path}");
        }
    }
}
