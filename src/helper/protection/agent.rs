//! The ECS agent's task-protection endpoint (`$ECS_AGENT_URI/task-protection/v1/state`,
//! agent 1.65.0 and later): the call, and a pure parser of its answers. The agent
//! answers `{"protection": {"ProtectionEnabled", "ExpirationDate", "TaskArn"}}`,
//! `{"failure": {"Arn", "Reason", "Detail"}}` (ECS's per-task failure: `TASK_NOT_VALID`
//! for a task of no service), or `{"error": {"Arn", "Code", "Message"}}` with the HTTP
//! status of the ECS API's error (`AccessDeniedException` 400 or 403,
//! `ThrottlingException`, `RequestCanceled` 504 when its own call to ECS timed out).
#![forbid(unsafe_code)]

use std::time::Duration;

use hyper::Uri;
use serde_json::Value;

use super::rule::{Answer, Ask, EXPIRES_IN_MINUTES};
use crate::helper::http_client;

/// Every call's limit, as the CloudWatch publisher's calls at most: the agent itself
/// gives up on its call to ECS after a few seconds and answers `RequestCanceled`.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Answers are a few hundred bytes.
const MAX_ANSWER: usize = 16 * 1024;

/// Makes one call, within `CALL_TIMEOUT`.
pub async fn call(endpoint: &Uri, ask: Ask) -> Answer {
    let (method, body) = match ask {
        Ask::Read => (hyper::Method::GET, None),
        Ask::Protect => (
            hyper::Method::PUT,
            Some(format!(
                r#"{{"ProtectionEnabled":true,"ExpiresInMinutes":{EXPIRES_IN_MINUTES}}}"#
            )),
        ),
        Ask::Clear => (
            hyper::Method::PUT,
            Some(r#"{"ProtectionEnabled":false}"#.to_string()),
        ),
    };
    let request = http_client::request(method, endpoint, body, MAX_ANSWER);
    match tokio::time::timeout(CALL_TIMEOUT, request).await {
        Ok(Ok((status, body))) => parse(status, &body),
        Ok(Err(reason)) => Answer::Failed(format!("the ECS agent: {reason}")),
        Err(_) => Answer::Unanswered(format!(
            "the ECS agent did not answer within {} (it may have carried the call out all the same: a set counts as set until cleared or lapsed)",
            crate::seconds::human(CALL_TIMEOUT)
        )),
    }
}

/// A field of `object` by name, in any case (the agent writes ECS's Go field names;
/// the API's own JSON has them in lower camel case).
fn field<'a>(object: &'a Value, name: &str) -> Option<&'a Value> {
    object
        .as_object()?
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value)
}

fn text(object: &Value, name: &str) -> String {
    field(object, name)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The agent's answer: HTTP status and body.
pub fn parse(status: u16, body: &str) -> Answer {
    let doc: Option<Value> = serde_json::from_str(body).ok();
    let doc = doc.as_ref().filter(|d| d.is_object());
    if let Some(protection) = doc.and_then(|d| field(d, "protection")) {
        if let Some(enabled) = field(protection, "ProtectionEnabled").and_then(Value::as_bool) {
            if (200..300).contains(&status) {
                return Answer::State { enabled };
            }
        }
    }
    if let Some(failure) = doc.and_then(|d| field(d, "failure")) {
        let reason = text(failure, "Reason");
        if reason == "TASK_NOT_VALID" {
            return Answer::NotAService;
        }
        let detail = text(failure, "Detail");
        return Answer::Failed(if detail.is_empty() {
            format!("ECS refused: {reason}")
        } else {
            format!("ECS refused: {reason} ({detail})")
        });
    }
    if let Some(error) = doc.and_then(|d| field(d, "error")) {
        let (code, message) = (text(error, "Code"), text(error, "Message"));
        let both = format!("{code}: {message}");
        return if code.starts_with("AccessDenied") {
            Answer::Denied(message)
        } else if code.starts_with("Throttl") || status == 429 {
            Answer::Throttled(both)
        } else {
            Answer::Failed(both)
        };
    }
    let shown: String = body.chars().take(200).collect();
    match status {
        403 => Answer::Denied(format!("HTTP 403: {shown}")),
        429 => Answer::Throttled(format!("HTTP 429: {shown}")),
        _ => Answer::Failed(format!(
            "the ECS agent answered HTTP {status}, not understood: {shown}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_answers() {
        // The shapes the ECS developer guide shows for the endpoint.
        let protected = r#"{"protection":{"ExpirationDate":"2023-12-20T21:57:44.837Z","ProtectionEnabled":true,"TaskArn":"arn:aws:ecs:us-west-2:111122223333:task/1234567890abcdef0"}}"#;
        assert_eq!(parse(200, protected), Answer::State { enabled: true });
        let cleared = r#"{"protection":{"ExpirationDate":null,"ProtectionEnabled":false,"TaskArn":"arn:aws:ecs:us-west-2:111122223333:task/1234567890abcdef0"}}"#;
        assert_eq!(parse(200, cleared), Answer::State { enabled: false });
        let standalone = r#"{"failure":{"Arn":"arn:aws:ecs:us-west-2:111122223333:task/1234567890abcdef0","Detail":null,"Reason":"TASK_NOT_VALID"}}"#;
        assert_eq!(parse(200, standalone), Answer::NotAService);
        let denied = r#"{"error":{"Arn":"arn:aws:ecs:us-west-2:111122223333:task/1234567890abcdef0","Code":"AccessDeniedException","Message":"User: arn:aws:sts::111122223333:assumed-role/my-ecs-task-role/1234567890abcdef0 is not authorized to perform: ecs:UpdateTaskProtection on resource: arn:aws:ecs:us-west-2:111122223333:task/1234567890abcdef0 because no identity-based policy allows the ecs:UpdateTaskProtection action"}}"#;
        assert!(
            matches!(parse(400, denied), Answer::Denied(m) if m.contains("ecs:UpdateTaskProtection"))
        );
        let throttled = r#"{"requestID":"x","error":{"Arn":"a","Code":"ThrottlingException","Message":"Rate exceeded"}}"#;
        assert!(
            matches!(parse(400, throttled), Answer::Throttled(m) if m.contains("Rate exceeded"))
        );
        let canceled = r#"{"error":{"Arn":"a","Code":"RequestCanceled","Message":"Timed out calling ECS Task Protection API"}}"#;
        assert!(matches!(parse(504, canceled), Answer::Failed(m) if m.contains("Timed out")));
        // The agent's own refusal when the task has no role: AccessDenied, 403.
        let no_role = r#"{"error":{"Arn":"a","Code":"AccessDeniedException","Message":"Invalid Request: no task IAM role credentials available for task"}}"#;
        assert!(matches!(parse(403, no_role), Answer::Denied(m) if m.contains("no task IAM role")));
    }

    #[test]
    fn answers_not_understood_fail_with_what_came() {
        assert!(
            matches!(parse(502, "<html>bad gateway</html>"), Answer::Failed(m) if m.contains("502") && m.contains("bad gateway"))
        );
        assert!(matches!(parse(429, ""), Answer::Throttled(_)));
        assert!(matches!(parse(403, "no"), Answer::Denied(_)));
        // A protection in an error status is no state.
        let odd = r#"{"protection":{"ProtectionEnabled":true}}"#;
        assert!(matches!(parse(500, odd), Answer::Failed(_)));
        // Another failure reason is said, with its detail.
        let missing = r#"{"failure":{"Arn":"a","Reason":"MISSING","Detail":"gone"}}"#;
        assert!(matches!(parse(200, missing), Answer::Failed(m) if m.contains("MISSING (gone)")));
        // Lower camel case, as the ECS API itself writes it.
        assert_eq!(
            parse(200, r#"{"protection":{"protectionEnabled":true}}"#),
            Answer::State { enabled: true }
        );
    }
}
