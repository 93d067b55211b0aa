use super::*;

fn session() -> (Arc<Session>, Arc<News>) {
    let news = Arc::new(News::default());
    let generation = news.begin();
    (Session::new("test", news.clone(), generation), news)
}

#[tokio::test]
async fn answers_reach_their_request_and_errors_map_to_statuses() {
    let (session, _) = session();
    let (one, rx_one) = session.register(None).unwrap();
    let (two, rx_two) = session.register(None).unwrap();
    assert_ne!(one, two);
    let inbound =
        session.receive(format!(r#"{{"jsonrpc":"2.0","id":{one},"result":{{"x":1}}}}"#).as_bytes());
    assert!(!inbound.malformed && inbound.replies.is_empty());
    assert_eq!(rx_one.await.unwrap(), Ok(json!({"x": 1})));
    let error =
        format!(r#"{{"jsonrpc":"2.0","id":"{two}","error":{{"code":-32602,"message":"bad"}}}}"#);
    session.receive(error.as_bytes());
    assert_eq!(
        rx_two.await.unwrap(),
        Err(UpstreamError::Refused {
            status: 400,
            message: "bad".into()
        })
    );
    // A late answer and garbage are ignored, never a panic.
    assert!(
        !session
            .receive(br#"{"jsonrpc":"2.0","id":99,"result":{}}"#)
            .malformed
    );
    assert!(session.receive(b"{not json").malformed);
    assert!(session.receive(b"[1, null]").malformed);
}

#[tokio::test]
async fn a_malformed_answer_ends_its_request_with_malformed() {
    let (session, _) = session();
    let (id, rx) = session.register(None).unwrap();
    let both = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}},"error":{{}}}}"#);
    assert!(session.receive(both.as_bytes()).malformed);
    assert!(matches!(
        rx.await.unwrap(),
        Err(UpstreamError::Malformed(_))
    ));
}

#[tokio::test]
async fn progress_goes_to_its_token_and_list_changes_are_news() {
    let (session, news) = session();
    let (tx, mut rx) = mpsc::channel(4);
    let (id, _answer) = session.register(Some(("call-1".into(), tx))).unwrap();
    let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress",
        "params":{"progressToken":"call-1","progress":1,"total":3,"message":"step 1","extra":true}}"#;
    session.receive(progress.as_bytes());
    assert_eq!(
        rx.recv().await.unwrap(),
        json!({"progress": 1, "total": 3, "message": "step 1"})
    );
    session.forget(id, Some("call-1"));
    session.receive(progress.as_bytes());
    assert!(
        rx.recv().await.is_none(),
        "a forgotten call's sender is dropped"
    );

    session.receive(br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#);
    assert_eq!(news.next().await, Change::Lists);
}

#[tokio::test]
async fn a_loss_fails_every_request_once_and_older_news_is_dropped() {
    let (session, news) = session();
    let (_, rx) = session.register(None).unwrap();
    session.lose("the server exited: signal 9");
    session.lose("again");
    assert_eq!(
        rx.await.unwrap(),
        Err(UpstreamError::Unreachable(
            "the server exited: signal 9".into()
        ))
    );
    assert!(session.register(None).is_err());
    assert_eq!(
        news.next().await,
        Change::Lost("the server exited: signal 9".into())
    );

    // A new generation: the old session's news is not news.
    let generation = news.begin();
    session.receive(br#"{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}"#);
    let fresh = Session::new("test", news.clone(), generation);
    fresh.receive(br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#);
    assert_eq!(news.next().await, Change::Lists);
    let pending = tokio::time::timeout(std::time::Duration::from_millis(20), news.next()).await;
    assert!(pending.is_err(), "no more news");
}

#[test]
fn server_requests_are_answered_at_once() {
    let (session, _) = session();
    let inbound = session.receive(br#"{"jsonrpc":"2.0","id":"s1","method":"ping"}"#);
    assert_eq!(
        inbound.replies,
        vec![json!({"jsonrpc": "2.0", "id": "s1", "result": {}})]
    );
    let inbound = session.receive(br#"{"jsonrpc":"2.0","id":4,"method":"roots/list"}"#);
    assert_eq!(inbound.replies[0]["error"]["code"], -32601);
    assert_eq!(inbound.replies[0]["id"], 4);
}

#[test]
fn the_id_of_an_overlong_message_is_found_at_either_end() {
    assert_eq!(
        overlong_id(br#"{"jsonrpc":"2.0","id":7,"result":{"content":"#, b""),
        Some(7)
    );
    assert_eq!(
        overlong_id(
            br#"{"result":{"id":3,"#,
            br#"xx"}]},"jsonrpc":"2.0","id":12}"#
        ),
        Some(12)
    );
    assert_eq!(overlong_id(br#"{"result":{"id":3,"#, br#"xx"}]}}"#), None);
    assert_eq!(overlong_id(b"garbage", b"garbage"), None);
    assert_eq!(overlong_id(br#" {"id" : "5", "#, b""), Some(5));
}

#[test]
fn errors_map_to_lmos_statuses() {
    let status = |code: i64| match refused(&json!({"code": code, "message": "m"})) {
        UpstreamError::Refused { status, .. } => status,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (
            status(-32601),
            status(-32002),
            status(-32600),
            status(-32000)
        ),
        (404, 404, 400, 500)
    );
}

#[test]
fn a_request_is_done_however_it_stops_waiting() {
    let (session, _) = session();
    let (answered, _rx) = session.register(None).unwrap();
    let (forgotten, _rx2) = session.register(None).unwrap();
    let (a, f) = (session.done(answered), session.done(forgotten));
    assert!(!a.is_cancelled() && !f.is_cancelled());
    session.receive(format!(r#"{{"jsonrpc":"2.0","id":{answered},"result":{{}}}}"#).as_bytes());
    session.forget(forgotten, None);
    assert!(a.is_cancelled() && f.is_cancelled());
    assert!(session.done(12345).is_cancelled());
}
