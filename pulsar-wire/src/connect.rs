//! `CommandConnect`, written by hand.
//!
//! Pulsar's generated classes write a message's fields in the order the
//! `.proto` declares them, and `CommandConnect` declares `auth_method_name`
//! (5) before `auth_data` (3). prost always writes in field-number order, so a
//! generated type would re-encode a connect with credentials differently from
//! Pulsar. This type writes Pulsar's order (1, 2, 5, 3, 4, 6 … 11) and reads
//! any order.

use bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::DecodeError;

use crate::proto::{AuthMethod, FeatureFlags};

/// The first command of a connection: the client's version, credentials,
/// protocol version and feature flags (`CommandConnect`, BaseCommand field 2).
#[derive(Clone, PartialEq, Default, Debug)]
pub struct CommandConnect {
    /// `client_version` (1, required), e.g. `Pulsar-Java-v4.2.4`.
    pub client_version: String,
    /// `auth_method` (2), deprecated upstream in favour of `auth_method_name`;
    /// an [`AuthMethod`] value.
    pub auth_method: Option<i32>,
    /// `auth_method_name` (5), e.g. `token`.
    pub auth_method_name: Option<String>,
    /// `auth_data` (3): the credentials.
    pub auth_data: Option<Vec<u8>>,
    /// `protocol_version` (4, default 0).
    pub protocol_version: Option<i32>,
    /// `proxy_to_broker_url` (6): the broker a client asks a Pulsar proxy to
    /// relay it to.
    pub proxy_to_broker_url: Option<String>,
    /// `original_principal` (7), set by a proxy.
    pub original_principal: Option<String>,
    /// `original_auth_data` (8), set by a proxy.
    pub original_auth_data: Option<String>,
    /// `original_auth_method` (9), set by a proxy.
    pub original_auth_method: Option<String>,
    /// `feature_flags` (10).
    pub feature_flags: Option<FeatureFlags>,
    /// `proxy_version` (11), set by a proxy.
    pub proxy_version: Option<String>,
}

impl CommandConnect {
    /// The protocol version, 0 when absent.
    pub fn protocol_version(&self) -> i32 {
        self.protocol_version.unwrap_or(0)
    }

    /// The deprecated auth method, [`AuthMethod::None`] when absent
    /// or unknown.
    pub fn auth_method(&self) -> AuthMethod {
        self.auth_method
            .and_then(|v| AuthMethod::try_from(v).ok())
            .unwrap_or(AuthMethod::None)
    }
}

fn opt_string_len(tag: u32, v: &Option<String>) -> usize {
    v.as_ref()
        .map_or(0, |s| encoding::string::encoded_len(tag, s))
}

fn put_opt_string(tag: u32, v: &Option<String>, buf: &mut impl BufMut) {
    if let Some(s) = v {
        encoding::string::encode(tag, s, buf);
    }
}

fn merge_opt_string(
    v: &mut Option<String>,
    wire_type: WireType,
    buf: &mut impl Buf,
    ctx: DecodeContext,
    field: &'static str,
) -> Result<(), DecodeError> {
    encoding::string::merge(wire_type, v.get_or_insert_with(String::new), buf, ctx).map_err(
        |mut e| {
            e.push("CommandConnect", field);
            e
        },
    )
}

impl prost::Message for CommandConnect {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        encoding::string::encode(1, &self.client_version, buf);
        if let Some(v) = self.auth_method {
            encoding::int32::encode(2, &v, buf);
        }
        put_opt_string(5, &self.auth_method_name, buf);
        if let Some(v) = &self.auth_data {
            encoding::bytes::encode(3, v, buf);
        }
        if let Some(v) = self.protocol_version {
            encoding::int32::encode(4, &v, buf);
        }
        put_opt_string(6, &self.proxy_to_broker_url, buf);
        put_opt_string(7, &self.original_principal, buf);
        put_opt_string(8, &self.original_auth_data, buf);
        put_opt_string(9, &self.original_auth_method, buf);
        if let Some(v) = &self.feature_flags {
            encoding::message::encode(10, v, buf);
        }
        put_opt_string(11, &self.proxy_version, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        let named = |field: &'static str| {
            move |mut e: DecodeError| {
                e.push("CommandConnect", field);
                e
            }
        };
        match tag {
            1 => encoding::string::merge(wire_type, &mut self.client_version, buf, ctx)
                .map_err(named("client_version")),
            2 => encoding::int32::merge(wire_type, self.auth_method.get_or_insert(0), buf, ctx)
                .map_err(named("auth_method")),
            3 => encoding::bytes::merge(
                wire_type,
                self.auth_data.get_or_insert_with(Vec::new),
                buf,
                ctx,
            )
            .map_err(named("auth_data")),
            4 => {
                encoding::int32::merge(wire_type, self.protocol_version.get_or_insert(0), buf, ctx)
                    .map_err(named("protocol_version"))
            }
            5 => merge_opt_string(
                &mut self.auth_method_name,
                wire_type,
                buf,
                ctx,
                "auth_method_name",
            ),
            6 => merge_opt_string(
                &mut self.proxy_to_broker_url,
                wire_type,
                buf,
                ctx,
                "proxy_to_broker_url",
            ),
            7 => merge_opt_string(
                &mut self.original_principal,
                wire_type,
                buf,
                ctx,
                "original_principal",
            ),
            8 => merge_opt_string(
                &mut self.original_auth_data,
                wire_type,
                buf,
                ctx,
                "original_auth_data",
            ),
            9 => merge_opt_string(
                &mut self.original_auth_method,
                wire_type,
                buf,
                ctx,
                "original_auth_method",
            ),
            10 => encoding::message::merge(
                wire_type,
                self.feature_flags.get_or_insert_with(FeatureFlags::default),
                buf,
                ctx,
            )
            .map_err(named("feature_flags")),
            11 => merge_opt_string(
                &mut self.proxy_version,
                wire_type,
                buf,
                ctx,
                "proxy_version",
            ),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        encoding::string::encoded_len(1, &self.client_version)
            + self
                .auth_method
                .map_or(0, |v| encoding::int32::encoded_len(2, &v))
            + opt_string_len(5, &self.auth_method_name)
            + self
                .auth_data
                .as_ref()
                .map_or(0, |v| encoding::bytes::encoded_len(3, v))
            + self
                .protocol_version
                .map_or(0, |v| encoding::int32::encoded_len(4, &v))
            + opt_string_len(6, &self.proxy_to_broker_url)
            + opt_string_len(7, &self.original_principal)
            + opt_string_len(8, &self.original_auth_data)
            + opt_string_len(9, &self.original_auth_method)
            + self
                .feature_flags
                .as_ref()
                .map_or(0, |v| encoding::message::encoded_len(10, v))
            + opt_string_len(11, &self.proxy_version)
    }

    fn clear(&mut self) {
        *self = CommandConnect::default();
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    #[test]
    fn credentials_are_written_in_pulsars_order_and_read_in_any() {
        let connect = CommandConnect {
            client_version: "c".to_owned(),
            auth_method_name: Some("token".to_owned()),
            auth_data: Some(b"x".to_vec()),
            protocol_version: Some(21),
            ..CommandConnect::default()
        };
        let pulsar_order = [
            0x0a, 1, b'c', 0x2a, 5, b't', b'o', b'k', b'e', b'n', 0x1a, 1, b'x', 0x20, 21,
        ];
        assert_eq!(connect.encode_to_vec(), pulsar_order);
        assert_eq!(connect.encoded_len(), pulsar_order.len());
        let number_order = [
            0x0a, 1, b'c', 0x1a, 1, b'x', 0x20, 21, 0x2a, 5, b't', b'o', b'k', b'e', b'n',
        ];
        assert_eq!(CommandConnect::decode(&number_order[..]).unwrap(), connect);
        assert_eq!(connect.auth_method(), AuthMethod::None);
        assert_eq!(CommandConnect::default().protocol_version(), 0);
    }

    #[test]
    fn unknown_fields_are_skipped_and_bad_ones_refused() {
        // Field 12 (unknown) before the version.
        let bytes = [0x62, 1, b'z', 0x0a, 1, b'c'];
        assert_eq!(
            CommandConnect::decode(&bytes[..]).unwrap().client_version,
            "c"
        );
        // A string field that is not UTF-8.
        let bytes = [0x0a, 1, 0xff];
        assert!(CommandConnect::decode(&bytes[..]).is_err());
    }
}
