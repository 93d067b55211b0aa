//! `lmos-sidecar raw`: what `websocat --protocol lmosprotocol URL` does,
//! without a tool the user would have to build. Each line of standard input
//! is sent as it is (the endpoint judges it: a bad line gets an LMOS
//! `error`), and each text message that comes back is printed as one line.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncBufReadExt;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use super::{connect, out, ClientError};

/// Runs until the endpoint closes, Ctrl-C, or, once standard input has
/// ended, `idle` passes without a message (`None`: no such limit).
/// `Ok(true)` when it ended as asked; the endpoint closing while input was
/// still coming is an error.
pub async fn run(url: &str, idle: Option<Duration>) -> Result<bool, ClientError> {
    let socket = connect(url).await?;
    let (mut sink, mut stream) = socket.split();
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut input_open = true;
    // Armed only once input has ended; pushed back by every message.
    let quiet = tokio::time::sleep(Duration::MAX / 4);
    let mut quiet = std::pin::pin!(quiet);
    let mut interrupt = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        tokio::select! {
            line = lines.next_line(), if input_open => match line {
                Ok(Some(line)) => {
                    let line = line.trim();
                    if line.is_empty() {
                        continue;
                    }
                    sink.send(WsMessage::Text(line.to_owned().into()))
                        .await
                        .map_err(|e| ClientError::Ended(e.to_string()))?;
                }
                Ok(None) => {
                    input_open = false;
                    if let Some(idle) = idle {
                        quiet.as_mut().reset(tokio::time::Instant::now() + idle);
                    }
                }
                Err(e) => return Err(ClientError::Usage(format!("cannot read standard input: {e}"))),
            },
            frame = stream.next() => match frame {
                Some(Ok(WsMessage::Text(text))) => {
                    out::line(&one_line(&text))?;
                    if let (false, Some(idle)) = (input_open, idle) {
                        quiet.as_mut().reset(tokio::time::Instant::now() + idle);
                    }
                }
                Some(Ok(WsMessage::Binary(b))) => eprintln!("(a binary message of {} bytes, not shown)", b.len()),
                Some(Ok(WsMessage::Close(frame))) => {
                    let why = frame.map(|f| format!("code {}, \"{}\"", u16::from(f.code), f.reason)).unwrap_or_else(|| "no reason given".into());
                    return ended(input_open, why);
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return ended(input_open, e.to_string()),
                None => return ended(input_open, "the connection dropped".into()),
            },
            () = &mut quiet, if !input_open && idle.is_some() => break,
            _ = &mut interrupt => break,
        }
    }
    let _ = sink.send(WsMessage::Close(None)).await;
    Ok(true)
}

/// The endpoint closed: expected once input is done, an error before.
fn ended(input_open: bool, why: String) -> Result<bool, ClientError> {
    if input_open {
        Err(ClientError::Ended(why))
    } else {
        eprintln!("The endpoint closed the connection ({why}).");
        Ok(true)
    }
}

/// Messages are one line as this sidecar writes them; another endpoint's
/// pretty-printed JSON is made one.
fn one_line(text: &str) -> String {
    if !text.contains('\n') {
        return text.to_owned();
    }
    serde_json::from_str::<serde_json::Value>(text)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| text.replace('\n', "\\n"))
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn each_message_is_one_line() {
        assert_eq!(one_line("{\"a\":1}"), "{\"a\":1}");
        assert_eq!(one_line("{\n  \"a\": 1\n}"), "{\"a\":1}");
        assert_eq!(one_line("not\njson"), "not\\njson");
    }
}
