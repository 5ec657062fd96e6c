//! Who may ask what of the API, and how fast: the bearer token, the size of a request body and
//! the time a client may take, checked before any handler or extractor runs; and the
//! connection loop that enforces the header timeout. Nothing here looks at what a request asks.

use super::{ApiState, ErrorBody};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

/// Largest accepted request body (a task spec).
pub const MAX_BODY: usize = 64 * 1024;
/// How long a client may take to send a request's headers.
pub const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a request may take, body and answer included.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The token check, the size check and the request timeout, before any handler or extractor
/// runs.
pub(super) async fn guard(
    State(s): State<ApiState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // The dashboard is read-only and shows no command, environment or log: readable without
    // the token (module doc of [`dashboard`]).
    let public = req.method() == axum::http::Method::GET
        && matches!(
            req.uri().path(),
            "/" | "/v1/dashboard"
                | "/v1/history"
                | "/assets/uPlot.min.js"
                | "/assets/uPlot.min.css"
        )
        // A task's progress, shares and metrics over time (no command, environment or log).
        || req.method() == axum::http::Method::GET
            && req
                .uri()
                .path()
                .strip_prefix("/v1/tasks/")
                .and_then(|p| p.strip_suffix("/history"))
                .is_some_and(|id| id.parse::<u64>().is_ok());
    if !public && let Some(r) = refused(&s, req.headers()) {
        return r;
    }
    // A body announced larger than any request takes is refused before it is read (waiting for
    // it would hold the connection until the request timeout).
    let announced = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = announced.filter(|n| *n > MAX_BODY as u64) {
        // Read (and drop) what the client sends, within bounds, before answering: a client
        // still writing its body when the connection closes gets a broken pipe, not the 413
        // (a 30 MB spec did).
        drain(req.into_body(), n).await;
        return too_large(&format!("this one is {n}"));
    }
    let mut req = req;
    if announced.is_none()
        && req
            .headers()
            .contains_key(axum::http::header::TRANSFER_ENCODING)
    {
        // A body of unannounced length (chunked) is read here, up to the limit, so that one
        // past it gets its 413 too, after what the client sends is read, rather than a
        // connection cut under it by the handler's extractor.
        let (parts, body) = req.into_parts();
        match tokio::time::timeout(REQUEST_TIMEOUT, at_most(body, MAX_BODY)).await {
            Ok(Ok(bytes)) => req = axum::extract::Request::from_parts(parts, bytes.into()),
            Ok(Err(rest)) => {
                drain(rest, DRAIN_BYTES).await;
                return too_large("this one is longer");
            }
            Err(_) => return timed_out(),
        }
    }
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(req)).await {
        Ok(r) => r,
        Err(_) => timed_out(),
    }
}

fn timed_out() -> Response {
    (
        StatusCode::REQUEST_TIMEOUT,
        axum::Json(ErrorBody::new("request not completed in time")),
    )
        .into_response()
}

/// The 413 for a body past [`MAX_BODY`] (`how`: what is known of its length); the connection
/// closes after it.
fn too_large(how: &str) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        [(axum::http::header::CONNECTION, "close")],
        axum::Json(ErrorBody::new(format!(
            "a request body is at most {MAX_BODY} bytes; {how}"
        ))),
    )
        .into_response()
}

/// The whole of `body` if it holds at most `limit` bytes; else the body, to drain what is left.
async fn at_most(mut body: axum::body::Body, limit: usize) -> Result<Vec<u8>, axum::body::Body> {
    use http_body_util::BodyExt;
    let mut got = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Some(d) = frame.data_ref() {
            got.extend_from_slice(d);
            if got.len() > limit {
                return Err(body);
            }
        }
    }
    Ok(got)
}

/// Most of a refused body read before the 413 (beyond it, after [`DRAIN_TIME`], or once the
/// client pauses for [`DRAIN_IDLE`], the answer goes and the connection closes).
const DRAIN_BYTES: u64 = 256 * 1024 * 1024;
/// How long a refused body is read before the 413.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(10);
/// A client that sends nothing for this long (it waits for an answer first) gets it then.
const DRAIN_IDLE: std::time::Duration = std::time::Duration::from_millis(500);

/// Read and drop up to `announced` bytes of `body`, within [`DRAIN_BYTES`], [`DRAIN_TIME`] and
/// while it keeps coming ([`DRAIN_IDLE`]).
async fn drain(body: axum::body::Body, announced: u64) {
    use http_body_util::BodyExt;
    let limit = announced.min(DRAIN_BYTES);
    let read = async move {
        let mut body = body;
        let mut seen = 0u64;
        while seen < limit {
            match tokio::time::timeout(DRAIN_IDLE, body.frame()).await {
                Ok(Some(Ok(f))) => seen += f.data_ref().map_or(0, |d| d.len() as u64),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, read).await;
}

/// Serve `app` on `listener` (HTTP/1.1) with [`HEADER_TIMEOUT`] until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, app: Router) {
    serve_with(listener, app, HEADER_TIMEOUT).await
}

/// [`serve`] with another header timeout (tests use a short one).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    app: Router,
    header_timeout: std::time::Duration,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "API connection ended");
            }
        });
    }
}

/// The refusal to send, if the request lacks the configured token.
fn refused(s: &ApiState, headers: &HeaderMap) -> Option<Response> {
    let Some(token) = &s.token else {
        return None;
    };
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    (!tapfinger_net::secret::bearer_matches(token, given)).then(|| {
        (
            StatusCode::UNAUTHORIZED,
            axum::Json(ErrorBody::new("missing or wrong bearer token")),
        )
            .into_response()
    })
}
