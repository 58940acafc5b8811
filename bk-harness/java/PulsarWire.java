/*
 * Judge of bkswitch's Pulsar wire frames: Apache Pulsar's own
 * org.apache.pulsar.common.protocol.Commands (pulsar-common) writes frames for
 * bkswitch to read, and reads bkswitch's frames the way Pulsar's decoder
 * does (the BaseCommand parsed by the generated LightProto class, the
 * payload checksum verified with Commands.hasChecksum/readChecksum and
 * Crc32cIntChecksum). Run by bkswitch-bk-harness (`PulsarWireJudge`); reads
 * one JSON request per line on stdin, answers one JSON line each on stdout:
 *
 *   {"cmd":"encode","kind":K,...parameters}
 *       -> {"ok":true,"data":<base64>}   the frame Commands builds for K
 *   {"cmd":"decode","data":<base64>}
 *       -> {"ok":true,"type":T,"fields":{...},"reencoded":<base64>,
 *           "identical":bool,"payload":{...}?}
 *          `fields` are read through the generated accessors; `reencoded`
 *          is the frame serialized again with Pulsar's classes (the command
 *          with writeTo, the message with serializeMetadataAndPayload);
 *          `payload` says whether a checksum was there and whether it held,
 *          the metadata fields, the broker entry metadata and the data.
 *   failures -> {"ok":false,"error":"..."}
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.scurrilous.circe.checksum.Crc32cIntChecksum;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.pulsar.client.impl.schema.SchemaInfoImpl;
import org.apache.pulsar.common.api.proto.BaseCommand;
import org.apache.pulsar.common.api.proto.BrokerEntryMetadata;
import org.apache.pulsar.common.api.proto.CommandAck;
import org.apache.pulsar.common.api.proto.CommandGetTopicsOfNamespace;
import org.apache.pulsar.common.api.proto.CommandLookupTopicResponse;
import org.apache.pulsar.common.api.proto.CommandSubscribe;
import org.apache.pulsar.common.api.proto.FeatureFlags;
import org.apache.pulsar.common.api.proto.MessageIdData;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.apache.pulsar.common.api.proto.ServerError;
import org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor;
import org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor;
import org.apache.pulsar.common.intercept.BrokerEntryMetadataInterceptor;
import org.apache.pulsar.common.protocol.ByteBufPair;
import org.apache.pulsar.common.protocol.Commands;
import org.apache.pulsar.common.protocol.schema.BytesSchemaVersion;
import org.apache.pulsar.common.schema.SchemaType;

public final class PulsarWire {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode out;
            try {
                out = handle(JSON.readTree(line));
            } catch (Throwable t) {
                out = JSON.createObjectNode();
                out.put("ok", false);
                out.put("error", t.getClass().getSimpleName() + ": " + t.getMessage());
            }
            System.out.println(JSON.writeValueAsString(out));
            System.out.flush();
        }
    }

    private static ObjectNode handle(JsonNode req) throws Exception {
        switch (req.get("cmd").asText()) {
            case "encode": {
                ObjectNode out = JSON.createObjectNode();
                out.put("ok", true);
                out.put("data", b64(bytes(encode(req.get("kind").asText(), req))));
                return out;
            }
            case "decode":
                return decode(Base64.getDecoder().decode(req.get("data").asText()));
            default:
                throw new IllegalArgumentException("unknown command " + req.get("cmd"));
        }
    }

    // ----------------------------------------------------------------- helpers

    private static String b64(byte[] b) {
        return Base64.getEncoder().encodeToString(b);
    }

    private static byte[] bytes(ByteBuf buf) {
        byte[] out = new byte[buf.readableBytes()];
        buf.getBytes(buf.readerIndex(), out);
        return out;
    }

    private static String str(JsonNode req, String field) {
        JsonNode n = req.get(field);
        return n == null || n.isNull() ? null : n.asText();
    }

    private static long num(JsonNode req, String field) {
        return req.get(field).asLong();
    }

    private static boolean flag(JsonNode req, String field) {
        JsonNode n = req.get(field);
        return n != null && n.asBoolean();
    }

    private static Map<String, String> props(JsonNode req, String field) {
        Map<String, String> m = new HashMap<>();
        JsonNode n = req.get(field);
        if (n != null) {
            n.fields().forEachRemaining(e -> m.put(e.getKey(), e.getValue().asText()));
        }
        return m;
    }

    private static ServerError serverError(JsonNode req) {
        return ServerError.valueOf(req.get("error").asText());
    }

    /** A message's metadata from {"producer":..,"sequence":..,"publishTime":..,"properties":{..},"key":..}. */
    private static MessageMetadata metadata(JsonNode req) {
        MessageMetadata md = new MessageMetadata()
            .setProducerName(req.get("producer").asText())
            .setSequenceId(num(req, "sequence"))
            .setPublishTime(num(req, "publishTime"));
        JsonNode p = req.get("properties");
        if (p != null) {
            p.fields().forEachRemaining(e -> md.addProperty().setKey(e.getKey()).setValue(e.getValue().asText()));
        }
        if (str(req, "key") != null) {
            md.setPartitionKey(str(req, "key"));
        }
        if (req.has("batch")) {
            md.setNumMessagesInBatch(req.get("batch").asInt());
        }
        return md;
    }

    private static ByteBuf payload(JsonNode req) {
        return Unpooled.wrappedBuffer(Base64.getDecoder().decode(req.get("payload").asText()));
    }

    private static ByteBuf newPing() throws Exception {
        // Package-private in Commands: the broker and the client call it.
        Method m = Commands.class.getDeclaredMethod("newPing");
        m.setAccessible(true);
        return (ByteBuf) m.invoke(null);
    }

    // ---------------------------------------------------------------- encoding

    private static ByteBuf encode(String kind, JsonNode r) throws Exception {
        switch (kind) {
            case "connect":
                return Commands.newConnect(str(r, "authMethod"), str(r, "authData"),
                    r.get("protocolVersion").asInt(), str(r, "clientVersion"), str(r, "proxyToBroker"),
                    str(r, "originalPrincipal"), str(r, "originalAuthData"), str(r, "originalAuthMethod"));
            case "connected":
                return Commands.newConnected(r.get("protocolVersion").asInt(),
                    r.get("maxMessageSize").asInt(), flag(r, "topicWatchers"));
            case "ping":
                return newPing();
            case "pong":
                return Commands.newPong();
            case "lookup":
                return Commands.newLookup(str(r, "topic"), str(r, "listener"), flag(r, "authoritative"),
                    num(r, "requestId"), props(r, "properties"));
            case "lookup-response":
                return Commands.newLookupResponse(str(r, "url"), str(r, "urlTls"), flag(r, "authoritative"),
                    CommandLookupTopicResponse.LookupType.valueOf(str(r, "response")), num(r, "requestId"),
                    flag(r, "proxyThrough"));
            case "lookup-error":
                return Commands.newLookupErrorResponse(serverError(r), str(r, "message"), num(r, "requestId"));
            case "partitioned-metadata":
                return Commands.newPartitionMetadataRequest(str(r, "topic"), num(r, "requestId"),
                    flag(r, "autoCreation"));
            case "partitioned-metadata-response":
                return Commands.newPartitionMetadataResponse(r.get("partitions").asInt(), num(r, "requestId"));
            case "partitioned-metadata-error":
                return Commands.newPartitionMetadataResponse(serverError(r), str(r, "message"),
                    num(r, "requestId"));
            case "error":
                return Commands.newError(num(r, "requestId"), serverError(r), str(r, "message"));
            case "close-producer":
                return Commands.newCloseProducer(num(r, "producerId"), num(r, "requestId"),
                    str(r, "url"), str(r, "urlTls"));
            case "close-consumer":
                return Commands.newCloseConsumer(num(r, "consumerId"), num(r, "requestId"),
                    str(r, "url"), str(r, "urlTls"));
            case "get-schema":
                return Commands.newGetSchema(num(r, "requestId"), str(r, "topic"),
                    r.has("version")
                        ? Optional.of(BytesSchemaVersion.of(Base64.getDecoder().decode(str(r, "version"))))
                        : Optional.empty());
            case "get-schema-response": {
                SchemaInfoImpl info = SchemaInfoImpl.builder()
                    .name(str(r, "name"))
                    .type(SchemaType.valueOf(str(r, "schemaType")))
                    .schema(str(r, "definition").getBytes(StandardCharsets.UTF_8))
                    .properties(props(r, "properties"))
                    .build();
                return Commands.newGetSchemaResponse(num(r, "requestId"), info,
                    BytesSchemaVersion.of(Base64.getDecoder().decode(str(r, "version"))));
            }
            case "get-schema-error":
                return Commands.newGetSchemaResponseError(num(r, "requestId"), serverError(r), str(r, "message"));
            case "get-topics":
                return Commands.newGetTopicsOfNamespaceRequest(str(r, "namespace"), num(r, "requestId"),
                    CommandGetTopicsOfNamespace.Mode.valueOf(str(r, "mode")), str(r, "pattern"),
                    str(r, "hash"), props(r, "properties"));
            case "get-topics-response": {
                List<String> topics = new ArrayList<>();
                r.get("topics").forEach(t -> topics.add(t.asText()));
                return Commands.serializeWithSize(Commands.newGetTopicsOfNamespaceResponseCommand(
                    topics, str(r, "hash"), flag(r, "filtered"), flag(r, "changed"), num(r, "requestId")));
            }
            case "producer":
                return Commands.newProducer(str(r, "topic"), num(r, "producerId"), num(r, "requestId"),
                    str(r, "producerName"), flag(r, "encrypted"), props(r, "metadata"), flag(r, "txn"));
            case "producer-success":
                return Commands.newProducerSuccess(num(r, "requestId"), str(r, "producerName"),
                    num(r, "lastSequenceId"), BytesSchemaVersion.of(new byte[] {0, 0, 0, 0, 0, 0, 0, 1}),
                    Optional.of(num(r, "topicEpoch")), true);
            case "subscribe":
                return Commands.newSubscribe(str(r, "topic"), str(r, "subscription"), num(r, "consumerId"),
                    num(r, "requestId"), CommandSubscribe.SubType.valueOf(str(r, "subType")), 0,
                    str(r, "consumerName"), 0);
            case "flow":
                return Commands.newFlow(num(r, "consumerId"), r.get("permits").asInt());
            case "ack":
                return Commands.newAck(num(r, "consumerId"), num(r, "ledgerId"), num(r, "entryId"), null,
                    CommandAck.AckType.valueOf(str(r, "ackType")), null, new HashMap<>(), num(r, "requestId"));
            case "success":
                return Commands.newSuccess(num(r, "requestId"));
            case "send-receipt":
                return Commands.newSendReceipt(num(r, "producerId"), num(r, "sequenceId"),
                    num(r, "highestSequenceId"), num(r, "ledgerId"), num(r, "entryId"));
            case "send": {
                ByteBufPair pair = Commands.newSend(num(r, "producerId"), num(r, "sequenceId"),
                    r.get("numMessages").asInt(),
                    flag(r, "noChecksum") ? Commands.ChecksumType.None : Commands.ChecksumType.Crc32c,
                    metadata(r), payload(r));
                return ByteBufPair.coalesce(pair);
            }
            case "message": {
                ByteBuf metadataAndPayload = Commands.serializeMetadataAndPayload(
                    Commands.ChecksumType.Crc32c, metadata(r), payload(r));
                if (flag(r, "brokerEntryMetadata")) {
                    Set<BrokerEntryMetadataInterceptor> interceptors = new LinkedHashSet<>();
                    interceptors.add(new AppendBrokerTimestampMetadataInterceptor());
                    AppendIndexMetadataInterceptor index = new AppendIndexMetadataInterceptor();
                    index.recoveryIndexGenerator(num(r, "index"));
                    interceptors.add(index);
                    metadataAndPayload = Commands.addBrokerEntryMetadata(metadataAndPayload, interceptors, 1);
                }
                return ByteBufPair.coalesce(Commands.newMessage(num(r, "consumerId"), num(r, "ledgerId"),
                    num(r, "entryId"), r.get("partition").asInt(), r.get("redeliveryCount").asInt(),
                    metadataAndPayload, null));
            }
            default:
                throw new IllegalArgumentException("cannot encode kind " + kind);
        }
    }

    // ---------------------------------------------------------------- decoding

    private static ObjectNode decode(byte[] data) {
        ByteBuf buf = Unpooled.wrappedBuffer(data);
        long total = buf.readUnsignedInt();
        if (total != buf.readableBytes()) {
            throw new IllegalArgumentException("total size " + total + " but " + buf.readableBytes() + " bytes follow");
        }
        int cmdSize = (int) buf.readUnsignedInt();
        int cmdStart = buf.readerIndex();
        BaseCommand cmd = new BaseCommand();
        cmd.parseFrom(buf, cmdSize);
        buf.readerIndex(cmdStart + cmdSize);

        ObjectNode out = JSON.createObjectNode();
        out.put("ok", true);
        out.put("type", cmd.getType().name());
        out.set("fields", fields(cmd));

        ByteBuf again = Unpooled.buffer();
        again.writeInt(0);
        again.writeInt(cmd.getSerializedSize());
        cmd.writeTo(again);
        if (buf.isReadable()) {
            out.set("payload", payload(buf, again));
        }
        again.setInt(0, again.readableBytes() - 4);
        byte[] re = bytes(again);
        out.put("reencoded", b64(re));
        out.put("identical", Arrays.equals(re, data));
        return out;
    }

    /** Reads a message as Pulsar's decoder does, and appends it to `again` with Pulsar's serializers. */
    private static ObjectNode payload(ByteBuf buf, ByteBuf again) {
        ObjectNode p = JSON.createObjectNode();
        BrokerEntryMetadata bem = Commands.parseBrokerEntryMetadataIfExist(buf);
        if (bem != null) {
            ObjectNode b = JSON.createObjectNode();
            if (bem.hasBrokerTimestamp()) {
                b.put("brokerTimestamp", bem.getBrokerTimestamp());
            }
            if (bem.hasIndex()) {
                b.put("index", bem.getIndex());
            }
            p.set("brokerEntryMetadata", b);
            again.writeShort(Commands.magicBrokerEntryMetadata);
            again.writeInt(bem.getSerializedSize());
            bem.writeTo(again);
        }
        boolean checksummed = Commands.hasChecksum(buf);
        p.put("checksummed", checksummed);
        if (checksummed) {
            int expected = Commands.readChecksum(buf);
            int computed = Crc32cIntChecksum.computeChecksum(buf);
            p.put("checksumValid", expected == computed);
        }
        MessageMetadata md = Commands.parseMessageMetadata(buf);
        ObjectNode m = JSON.createObjectNode();
        m.put("producer", md.getProducerName());
        m.put("sequence", md.getSequenceId());
        m.put("publishTime", md.getPublishTime());
        ObjectNode props = JSON.createObjectNode();
        md.getPropertiesList().forEach(kv -> props.put(kv.getKey(), kv.getValue()));
        m.set("properties", props);
        if (md.hasPartitionKey()) {
            m.put("key", md.getPartitionKey());
        }
        if (md.hasNumMessagesInBatch()) {
            m.put("batch", md.getNumMessagesInBatch());
        }
        p.set("metadata", m);
        byte[] data = bytes(buf);
        p.put("data", b64(data));
        again.writeBytes(Commands.serializeMetadataAndPayload(
            checksummed ? Commands.ChecksumType.Crc32c : Commands.ChecksumType.None,
            md, Unpooled.wrappedBuffer(data)));
        return p;
    }

    /** The fields the judge tests look at, read through Pulsar's accessors. */
    private static ObjectNode fields(BaseCommand cmd) {
        ObjectNode f = JSON.createObjectNode();
        switch (cmd.getType()) {
            case CONNECT: {
                var c = cmd.getConnect();
                f.put("clientVersion", c.getClientVersion());
                f.put("protocolVersion", c.getProtocolVersion());
                if (c.hasAuthMethodName()) {
                    f.put("authMethod", c.getAuthMethodName());
                }
                if (c.hasAuthData()) {
                    f.put("authData", new String(c.getAuthData(), StandardCharsets.UTF_8));
                }
                if (c.hasProxyToBrokerUrl()) {
                    f.put("proxyToBroker", c.getProxyToBrokerUrl());
                }
                if (c.hasFeatureFlags()) {
                    f.put("authRefresh", c.getFeatureFlags().isSupportsAuthRefresh());
                    f.put("brokerEntryMetadata", c.getFeatureFlags().isSupportsBrokerEntryMetadata());
                }
                break;
            }
            case CONNECTED: {
                var c = cmd.getConnected();
                f.put("serverVersion", c.getServerVersion());
                f.put("protocolVersion", c.getProtocolVersion());
                if (c.hasMaxMessageSize()) {
                    f.put("maxMessageSize", c.getMaxMessageSize());
                }
                if (c.hasFeatureFlags()) {
                    FeatureFlags ff = c.getFeatureFlags();
                    f.put("topicWatchers", ff.isSupportsTopicWatchers());
                }
                break;
            }
            case LOOKUP: {
                var l = cmd.getLookupTopic();
                f.put("topic", l.getTopic());
                f.put("requestId", l.getRequestId());
                f.put("authoritative", l.isAuthoritative());
                break;
            }
            case LOOKUP_RESPONSE: {
                var l = cmd.getLookupTopicResponse();
                f.put("requestId", l.getRequestId());
                if (l.hasResponse()) {
                    f.put("response", l.getResponse().name());
                }
                if (l.hasBrokerServiceUrl()) {
                    f.put("url", l.getBrokerServiceUrl());
                }
                if (l.hasBrokerServiceUrlTls()) {
                    f.put("urlTls", l.getBrokerServiceUrlTls());
                }
                f.put("authoritative", l.isAuthoritative());
                f.put("proxyThrough", l.isProxyThroughServiceUrl());
                if (l.hasError()) {
                    f.put("error", l.getError().name());
                }
                if (l.hasMessage()) {
                    f.put("message", l.getMessage());
                }
                break;
            }
            case PARTITIONED_METADATA_RESPONSE: {
                var m = cmd.getPartitionMetadataResponse();
                f.put("requestId", m.getRequestId());
                if (m.hasPartitions()) {
                    f.put("partitions", m.getPartitions());
                }
                if (m.hasResponse()) {
                    f.put("response", m.getResponse().name());
                }
                if (m.hasError()) {
                    f.put("error", m.getError().name());
                }
                break;
            }
            case ERROR: {
                var e = cmd.getError();
                f.put("requestId", e.getRequestId());
                f.put("error", e.getError().name());
                f.put("message", e.getMessage());
                break;
            }
            case CLOSE_PRODUCER: {
                var c = cmd.getCloseProducer();
                f.put("producerId", c.getProducerId());
                f.put("requestId", c.getRequestId());
                break;
            }
            case CLOSE_CONSUMER: {
                var c = cmd.getCloseConsumer();
                f.put("consumerId", c.getConsumerId());
                f.put("requestId", c.getRequestId());
                break;
            }
            case GET_SCHEMA_RESPONSE: {
                var s = cmd.getGetSchemaResponse();
                f.put("requestId", s.getRequestId());
                if (s.hasSchema()) {
                    f.put("name", s.getSchema().getName());
                    f.put("schemaType", s.getSchema().getType().name());
                    f.put("definition", new String(s.getSchema().getSchemaData(), StandardCharsets.UTF_8));
                }
                if (s.hasErrorCode()) {
                    f.put("error", s.getErrorCode().name());
                }
                break;
            }
            case GET_TOPICS_OF_NAMESPACE_RESPONSE: {
                var t = cmd.getGetTopicsOfNamespaceResponse();
                f.put("requestId", t.getRequestId());
                ArrayNode topics = JSON.createArrayNode();
                t.getTopicsList().forEach(topics::add);
                f.set("topics", topics);
                break;
            }
            case SEND: {
                var s = cmd.getSend();
                f.put("producerId", s.getProducerId());
                f.put("sequenceId", s.getSequenceId());
                f.put("numMessages", s.getNumMessages());
                break;
            }
            case MESSAGE: {
                var m = cmd.getMessage();
                MessageIdData id = m.getMessageId();
                f.put("consumerId", m.getConsumerId());
                f.put("ledgerId", id.getLedgerId());
                f.put("entryId", id.getEntryId());
                break;
            }
            default:
                break;
        }
        return f;
    }
}
