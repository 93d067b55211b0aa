//! Runs a client subcommand. The exit code says how it went: 0 success
//! (or whoever read the output stopped reading), 1 the Thing answered with
//! an error or a failed action, 2 no answer, the connection ended, or the
//! output could not be written.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};

use super::cli::{Command, Target};
use super::{message, out, things, ClientError, Output};
use crate::auth::credentials;
use crate::topics::{escape, Topics, EVENTS, PROPERTIES};

/// A command's result as the process's exit code, with one line on
/// standard error when it failed.
pub fn exit_code(result: Result<bool, ClientError>) -> ExitCode {
    match result {
        Ok(true) | Err(ClientError::PipeClosed) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("Error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Prints text (the configuration) the way every command prints.
pub fn print(text: &str) -> ExitCode {
    exit_code(out::text(text).map(|()| true))
}

pub fn run_client(command: Command) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("Error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async {
        // A closed pipe ends every command quietly, at once, not at its
        // next line (docs/cli.md).
        tokio::select! {
            result = dispatch(command) => result,
            () = out::closed() => Err(ClientError::PipeClosed),
        }
    });
    // `raw` may leave a blocking read of standard input behind.
    runtime.shutdown_background();
    exit_code(result)
}

fn json_arg(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// An action, and the correlation ID that names the invocation.
fn named(action: &str, correlation: Option<String>) -> Value {
    let mut members = correlation.map_or(json!({}), |c| json!({"correlationID": c}));
    members["action"] = json!(action);
    members
}

async fn ask(to: &Target, message_type: &str, members: Value) -> Result<bool, ClientError> {
    let request = message(&to.thing, message_type, members);
    let timeout = Duration::from_secs(to.timeout);
    super::request(&to.url, request, to.output(), timeout).await
}

async fn dispatch(command: Command) -> Result<bool, ClientError> {
    match command {
        Command::Raw { url, idle } => {
            let idle = (idle > 0).then(|| Duration::from_secs(idle));
            super::raw::run(&url, idle).await
        }
        Command::Sub {
            to,
            events,
            properties,
            count,
            mqtt,
            prefix,
        } => match mqtt {
            Some(mqtt) => {
                let filters = mqtt_filters(&prefix, &to.thing, &events, &properties)?;
                super::subscribe_mqtt(&mqtt, filters, to.output(), count).await
            }
            None => {
                let requests = ws_requests(&to, events, properties).await?;
                super::subscribe(&to.url, requests, to.output(), count).await
            }
        },
        Command::Things { url, json } => {
            let output = if json { Output::Json } else { Output::Human };
            super::things(&url, output).await
        }
        Command::Check { url } => {
            let report = super::check::run(&url).await;
            out::text(&super::check::table(&report))?;
            Ok(report.iter().all(|c| c.passed))
        }
        Command::Read { to, name } => ask(&to, "readProperty", json!({"name": name})).await,
        Command::Write { to, name, value } => {
            let members = json!({"name": name, "data": json_arg(&value)});
            ask(&to, "writeProperty", members).await
        }
        Command::Invoke {
            to,
            action,
            input,
            correlation_id,
            stream,
            save,
        } => {
            let mut members = named(&action, correlation_id);
            if let Some(input) = input {
                members["input"] = json_arg(&input);
            }
            if stream || save.is_some() {
                members["stream"] = json!(true);
            }
            let request = message(&to.thing, "invokeAction", members);
            let timeout = Duration::from_secs(to.timeout);
            let save = save.map(super::save::Saving::new);
            super::request_saving(&to.url, request, to.output(), timeout, save).await
        }
        Command::Query {
            to,
            action,
            correlation_id,
        } => ask(&to, "queryAction", named(&action, correlation_id)).await,
        Command::Cancel {
            to,
            action,
            correlation_id,
        } => ask(&to, "cancelAction", named(&action, correlation_id)).await,
        Command::DemoAgent { url } => {
            crate::demo_agent::run(&url).await;
            Ok(true)
        }
        Command::HashPassword => hash_password(),
        Command::NewToken => new_token(),
        Command::Config => Err(ClientError::Usage(
            "`config` is not a client command".into(),
        )),
    }
}

/// The MQTT filters for `sub --mqtt`; `+` as the Thing is every Thing.
fn mqtt_filters(
    prefix: &str,
    thing: &str,
    events: &[String],
    properties: &[String],
) -> Result<Vec<String>, ClientError> {
    let topics = Topics::new(prefix).map_err(|e| ClientError::Usage(e.to_string()))?;
    // A Thing ID is escaped (`+` would become `%2B`); the wildcard is not.
    let thing = if thing == "+" {
        "+".into()
    } else {
        escape(thing)
    };
    let filter = |kind: &str, name: &str| format!("{}/{thing}/{kind}/{name}", topics.prefix());
    let mut filters: Vec<String> = events
        .iter()
        .map(|e| filter(EVENTS, &escape(e)))
        .chain(properties.iter().map(|p| filter(PROPERTIES, &escape(p))))
        .collect();
    if filters.is_empty() {
        filters = vec![filter(EVENTS, "+"), filter(PROPERTIES, "+")];
    }
    Ok(filters)
}

/// The lmosprotocol requests for `sub` over WebSocket. Without --event or
/// --property: every event, and every observable property the Thing's TD
/// names (the protocol has no "observe all properties").
async fn ws_requests(
    to: &Target,
    events: Vec<String>,
    mut properties: Vec<String>,
) -> Result<Vec<Value>, ClientError> {
    let things = if to.thing == "+" {
        let ids = things::ids(&to.url).await?;
        eprintln!(
            "Subscribing to the {} Things in the directory now (--mqtt also sees Things that come later).",
            ids.len()
        );
        ids
    } else {
        vec![to.thing.clone()]
    };
    let everything = events.is_empty() && properties.is_empty();
    let mut requests = Vec::new();
    for thing in &things {
        if everything {
            requests.push(message(thing, "subscribeAllEvents", json!({})));
            properties = match things::observable(&to.url, thing).await {
                Ok(names) => names,
                Err(e) => {
                    eprintln!("Events only for {thing}: {e}.");
                    Vec::new()
                }
            };
        }
        for e in &events {
            requests.push(message(thing, "subscribeEvent", json!({"event": e})));
        }
        for p in &properties {
            requests.push(message(thing, "observeProperty", json!({"name": p})));
        }
    }
    Ok(requests)
}

fn hash_password() -> Result<bool, ClientError> {
    let mut password = String::new();
    std::io::stdin()
        .read_line(&mut password)
        .map_err(|_| ClientError::Usage("cannot read the password from standard input".into()))?;
    let password = password.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        return Err(ClientError::Usage("the password is empty".into()));
    }
    let hash = credentials::hash_password(password);
    out::line(&format!("password_hash = \"{hash}\""))?;
    Ok(true)
}

fn new_token() -> Result<bool, ClientError> {
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    out::line(&format!("token        = {token}"))?;
    let sha = credentials::sha256_hex(token.as_bytes());
    out::line(&format!("token_sha256 = \"{sha}\""))?;
    Ok(true)
}
