//! Opening, supervising and re-establishing the ZooKeeper session (see the
//! parent module's notes on the client library), and closing it.

use super::*;

/// Opens a ZooKeeper handle, waits for its session and makes sure the chroot
/// exists.
pub(super) async fn open_session(
    url: &str,
    hosts: &str,
    chroot: &str,
    options: &ZkStoreOptions,
    shared: &Arc<Shared>,
    generation: u64,
) -> Result<Conn> {
    let unavailable = |reason: String| MetadataError::Unavailable {
        op: Operation::Connect,
        path: url.to_owned(),
        reason,
    };
    let connecting = ZooKeeper::connect_with_retry_time(
        hosts,
        options.session_timeout,
        |_event| {},
        options.reconnect_delay,
    );
    let deadline = tokio::time::Instant::now() + options.connect_timeout;
    let zk = match tokio::time::timeout_at(deadline, connecting).await {
        Ok(Ok(zk)) => zk,
        Ok(Err(e)) => {
            return Err(MetadataError::InvalidArgument {
                op: Operation::Connect,
                path: url.to_owned(),
                reason: format!("the ZooKeeper client refused the hosts `{hosts}`: {e:?}"),
            })
        }
        Err(_) => {
            return Err(unavailable(format!(
                "no ZooKeeper server of `{hosts}` accepted a connection within {:?}",
                options.connect_timeout
            )))
        }
    };
    let listener_shared = shared.clone();
    zk.add_listener(move |state| on_state(&listener_shared, generation, state));
    let conn = Conn { zk, generation };
    let ready = async {
        conn.zk.exists("/", false).await?;
        if let Some(auth) = &options.auth {
            auth.send(&conn.zk).await?;
        }
        create_path(&conn.zk, chroot, node_acl(options)).await?;
        if options.auth.is_some() {
            // `exists` and `create` of an existing node check no ACL: reading
            // the chroot tells whether the credentials are the right ones.
            conn.zk.get_children(chroot_node(chroot), false).await?;
        }
        Ok(())
    };
    match tokio::time::timeout_at(deadline, ready).await {
        Ok(Ok(())) => Ok(conn),
        outcome => {
            let denied = matches!(outcome, Ok(Err(ZkError::NoAuth | ZkError::AuthFailed)));
            let reason = match outcome {
                Ok(Err(ZkError::NoAuth | ZkError::AuthFailed)) => format!(
                    "opening the chroot `{}` on `{hosts}`: {}",
                    chroot_node(chroot),
                    denied_reason(options)
                ),
                Ok(Err(e)) => format!("opening a session on `{hosts}` failed: {e:?}"),
                _ => format!(
                    "no ZooKeeper session on `{hosts}` within {:?}",
                    options.connect_timeout
                ),
            };
            // Best effort: lets the library's task stop once it can send it.
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(5), conn.zk.close()).await;
            });
            if denied {
                return Err(MetadataError::PermissionDenied {
                    op: Operation::Connect,
                    path: url.to_owned(),
                    reason,
                });
            }
            Err(unavailable(reason))
        }
    }
}

/// The chroot as a ZooKeeper path (`/` for none).
fn chroot_node(chroot: &str) -> &str {
    if chroot.is_empty() {
        "/"
    } else {
        chroot
    }
}

/// The ACL of the nodes a store with these options creates.
pub(super) fn node_acl(options: &ZkStoreOptions) -> Vec<Acl> {
    match &options.auth {
        Some(_) => ZkAuth::acl(),
        None => Acl::open_unsafe().clone(),
    }
}

/// Why ZooKeeper refused access, naming the user (never the password).
pub(super) fn denied_reason(options: &ZkStoreOptions) -> String {
    match &options.auth {
        Some(auth) => format!(
            "ZooKeeper refused access to the digest user `{}`: wrong password, or the \
             node's ACL belongs to other credentials",
            auth.user
        ),
        None => "ZooKeeper refused access without credentials: the node's ACL needs them \
                 (set ZkStoreOptions::auth)"
            .to_owned(),
    }
}

/// Creates every level of `path` (persistent, empty), ignoring existing ones.
pub(super) async fn create_path(
    zk: &ZooKeeper,
    path: &str,
    acl: Vec<Acl>,
) -> std::result::Result<(), ZkError> {
    let mut end = 0;
    while end < path.len() {
        end = path[end + 1..]
            .find('/')
            .map_or(path.len(), |i| end + 1 + i);
        match zk
            .create(
                &path[..end],
                Vec::new(),
                acl.clone(),
                zookeeper_async::CreateMode::Persistent,
            )
            .await
        {
            Ok(_) | Err(ZkError::NodeExists) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The library's state listener: a fast path that stops operations from using
/// a lost or expired connection, and a hand-off to the supervisor.
#[allow(deprecated)]
pub(super) fn on_state(shared: &Shared, generation: u64, state: ZkState) {
    if shared.generation.load(Ordering::Acquire) == generation {
        match state {
            ZkState::Connecting => {
                shared.state.send_if_modified(|s| {
                    let lost = *s == ConnState::Connected;
                    if lost {
                        *s = ConnState::Disconnected;
                    }
                    lost
                });
            }
            ZkState::NotConnected => {
                shared.state.send_if_modified(|s| {
                    let expired = *s != ConnState::Closed && *s != ConnState::Expired;
                    if expired {
                        *s = ConnState::Expired;
                    }
                    expired
                });
            }
            _ => {}
        }
    }
    let _ = shared.events.send((generation, state));
}

/// Turns the library's states into session events, and replaces the handle
/// when the session expired.
#[allow(deprecated)]
pub(super) async fn supervise(
    store: Weak<Inner>,
    mut events: mpsc::UnboundedReceiver<(u64, ZkState)>,
) {
    let mut closed_rx = match store.upgrade() {
        Some(inner) => inner.shared.state.subscribe(),
        None => return,
    };
    let mut connected = true;
    loop {
        let (generation, state) = tokio::select! {
            event = events.recv() => match event {
                Some(event) => event,
                None => return,
            },
            changed = closed_rx.changed() => {
                if changed.is_err() || *closed_rx.borrow() == ConnState::Closed {
                    return;
                }
                continue;
            }
        };
        let Some(inner) = store.upgrade() else {
            return;
        };
        if inner.is_closed() {
            return;
        }
        if generation != inner.shared.generation.load(Ordering::Acquire) {
            continue;
        }
        match state {
            ZkState::Connecting => {
                inner.set_state_from(ConnState::Connected, ConnState::Disconnected);
                if connected {
                    connected = false;
                    warn!(url = %inner.url, "ZooKeeper connection lost");
                    inner.signal(Signal::Session(SessionEvent::ConnectionLost));
                }
            }
            ZkState::Connected | ZkState::ConnectedReadOnly => {
                if !connected {
                    // The server forgets the credentials with the connection
                    // and the client library does not send them again.
                    if let Some(auth) = &inner.options.auth {
                        let conn = inner.conn.load_full();
                        let sent = tokio::time::timeout(
                            inner.options.operation_timeout,
                            auth.send(&conn.zk),
                        )
                        .await;
                        if !matches!(sent, Ok(Ok(()))) {
                            warn!(url = %inner.url, "sending the ZooKeeper credentials again failed");
                        }
                    }
                }
                inner.set_state_from(ConnState::Disconnected, ConnState::Connected);
                if !connected {
                    connected = true;
                    info!(url = %inner.url, "ZooKeeper connection re-established, same session");
                    inner.signal(Signal::Session(SessionEvent::Reconnected));
                }
            }
            ZkState::NotConnected => {
                inner.set_state_from(ConnState::Connected, ConnState::Expired);
                inner.set_state_from(ConnState::Disconnected, ConnState::Expired);
                if connected {
                    inner.signal(Signal::Session(SessionEvent::ConnectionLost));
                }
                warn!(url = %inner.url, "ZooKeeper session expired; opening a new session");
                inner.signal(Signal::Session(SessionEvent::SessionExpired));
                drop(inner);
                if !reestablish(&store).await {
                    return;
                }
                connected = true;
            }
            _ => {}
        }
    }
}

/// Opens new sessions until one works or the store goes away; false when the
/// store is closed or dropped.
async fn reestablish(store: &Weak<Inner>) -> bool {
    let mut backoff = Duration::from_millis(100);
    loop {
        let Some(inner) = store.upgrade() else {
            return false;
        };
        if inner.is_closed() {
            return false;
        }
        let generation = inner.conn.load().generation + 1;
        match open_session(
            &inner.url,
            &inner.hosts,
            &inner.chroot,
            &inner.options,
            &inner.shared,
            generation,
        )
        .await
        {
            Ok(conn) => {
                let old = inner.conn.swap(Arc::new(conn));
                inner.shared.generation.store(generation, Ordering::Release);
                inner.runtime.spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(5), old.zk.close()).await;
                });
                if inner.is_closed() {
                    return false;
                }
                inner.set_state_from(ConnState::Expired, ConnState::Connected);
                info!(url = %inner.url, generation, "new ZooKeeper session established");
                inner.signal(Signal::Session(SessionEvent::SessionReestablished));
                return true;
            }
            Err(e) => {
                debug!(url = %inner.url, error = %e, "opening a new ZooKeeper session failed");
                drop(inner);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Ends a session: deletes the ephemeral nodes the store created in it, then
/// closes the session.
///
/// The Rust client reports a close as done once the request is written, before
/// the server removed the session's ephemeral nodes (the Java client waits for
/// the server). Deleting them first (only those still owned by this session,
/// at the version read) makes them gone for every client when `close` returns,
/// as with the Java client.
pub(super) async fn close_session(
    conn: &Conn,
    owned: OwnedEphemerals,
) -> std::result::Result<(), ZkError> {
    for path in &owned.paths {
        if let Ok(Some(stat)) = conn.zk.exists(path, false).await {
            if stat.ephemeral_owner == owned.session_id {
                let _ = conn.zk.delete(path, Some(stat.version)).await;
            }
        }
    }
    conn.zk.close().await
}
