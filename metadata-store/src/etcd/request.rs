//! Sending requests to etcd: the operation timeout, resending a request that
//! never reached etcd, and what an etcd error means for the caller.

use std::future::Future;

use etcd_client::{GetOptions, GetResponse, Txn, TxnResponse};

use super::{endpoints, Inner};
use crate::error::{MetadataError, Operation, Result};

impl Inner {
    pub(super) fn unavailable(&self, op: Operation, path: &str, reason: String) -> MetadataError {
        MetadataError::Unavailable {
            op,
            path: path.to_owned(),
            reason,
        }
    }

    pub(super) fn map_err(
        &self,
        e: etcd_client::Error,
        op: Operation,
        path: &str,
    ) -> MetadataError {
        self.map_err_ref(&e, op, path)
    }

    pub(super) fn map_err_ref(
        &self,
        e: &etcd_client::Error,
        op: Operation,
        path: &str,
    ) -> MetadataError {
        let text = e.to_string();
        if text.contains("requested lease not found") {
            return MetadataError::SessionExpired {
                op,
                path: path.to_owned(),
            };
        }
        match e {
            // etcd with authentication on answers a request without a
            // user "user name is empty" (InvalidArgument).
            etcd_client::Error::GRpcStatus(status)
                if matches!(
                    format!("{:?}", status.code()).as_str(),
                    "Unauthenticated" | "PermissionDenied"
                ) || status.message().contains("user name is empty") =>
            {
                let user = self
                    .options
                    .user
                    .as_ref()
                    .map_or_else(|| "no user".to_owned(), |u| format!("user `{}`", u.name));
                MetadataError::PermissionDenied {
                    op,
                    path: path.to_owned(),
                    reason: format!(
                        "etcd `{}` refused {user}: {} (the role needs readwrite on the \
                         store's prefix)",
                        self.hosts,
                        status.message()
                    ),
                }
            }
            etcd_client::Error::GRpcStatus(status)
                if !matches!(
                    format!("{:?}", status.code()).as_str(),
                    "Unavailable"
                        | "DeadlineExceeded"
                        | "Cancelled"
                        | "Unknown"
                        | "ResourceExhausted"
                ) =>
            {
                MetadataError::Internal {
                    op,
                    path: path.to_owned(),
                    reason: format!("etcd `{}` answered {status}", self.hosts),
                }
            }
            other => self.unavailable(
                op,
                path,
                format!("etcd `{}` cannot be reached: {other}", self.hosts),
            ),
        }
    }

    /// Runs one operation within the operation timeout.
    pub(super) async fn run<T>(
        &self,
        op: Operation,
        path: &str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        if self.is_closed() {
            return Err(MetadataError::Closed {
                op,
                path: path.to_owned(),
            });
        }
        match tokio::time::timeout(self.options.operation_timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(self.unavailable(
                op,
                path,
                format!(
                    "no answer from etcd `{}` within the {:?} operation timeout",
                    self.hosts, self.options.operation_timeout
                ),
            )),
        }
    }

    /// Whether an operation that failed with `e` is sent again: its request
    /// never reached etcd (a member refused the connection) and the store is
    /// open. The endpoint doctor is woken to take that member out of use; the
    /// operation timeout of [`run`](Self::run) bounds the resends.
    pub(super) async fn resend(&self, e: &etcd_client::Error) -> bool {
        if self.is_closed() || !endpoints::is_connect_error(e) {
            return false;
        }
        let Some(doctor) = &self.doctor else {
            return false;
        };
        doctor.wake();
        tokio::time::sleep(endpoints::RESEND_DELAY).await;
        true
    }

    pub(super) async fn txn(&self, op: Operation, path: &str, txn: Txn) -> Result<TxnResponse> {
        self.txn_raw(txn)
            .await
            .map_err(|e| self.map_err(e, op, path))
    }

    /// A transaction, sent again while its request never reached etcd.
    pub(super) async fn txn_raw(
        &self,
        txn: Txn,
    ) -> std::result::Result<TxnResponse, etcd_client::Error> {
        loop {
            match self.kv().txn(txn.clone()).await {
                Err(e) if self.resend(&e).await => {}
                r => return r,
            }
        }
    }

    /// A range read, sent again like [`txn`](Self::txn).
    pub(super) async fn get(
        &self,
        op: Operation,
        path: &str,
        key: Vec<u8>,
        options: Option<GetOptions>,
    ) -> Result<GetResponse> {
        loop {
            match self.kv().get(key.clone(), options.clone()).await {
                Err(e) if self.resend(&e).await => {}
                r => return r.map_err(|e| self.map_err(e, op, path)),
            }
        }
    }
}
