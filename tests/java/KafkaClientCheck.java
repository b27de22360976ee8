import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.Future;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's Java client (kafka-clients 4.x) against a broker, driven by tests/java: each
 * subcommand does one scenario and prints what it saw as lines "event key=value ...",
 * which the Python test checks. Values never hold spaces. Any exception ends the program
 * with exit code 1 and its stack trace on stderr.
 *
 *   produce BOOTSTRAP TOPIC_PREFIX IDEMPOTENCE   every codec x acks=all,1
 *   consume BOOTSTRAP GROUP TOPICS COUNT         a group member reads, commits; a second
 *                                                member joins and the group rebalances
 *   admin   BOOTSTRAP                            the AdminClient calls, one after another
 *   transactions BOOTSTRAP TOPIC TXN_ID GROUP    a transactional producer commits (with
 *                                                GROUP's offsets) and aborts; consumers
 *                                                read both isolation levels; a second
 *                                                producer with TXN_ID fences the first
 */
public final class KafkaClientCheck {
    static final List<String> CODECS = List.of("none", "gzip", "snappy", "lz4", "zstd");
    static final List<String> ACKS = List.of("all", "1");
    static final int RECORDS_PER_PRODUCER = 3;
    static final Duration TIMEOUT = Duration.ofSeconds(30);

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "produce" -> produce(args[1], args[2], Boolean.parseBoolean(args[3]));
            case "consume" -> consume(args[1], args[2], List.of(args[3].split(",")),
                    Integer.parseInt(args[4]));
            case "admin" -> admin(args[1]);
            case "transactions" -> transactions(args[1], args[2], args[3], args[4]);
            default -> throw new IllegalArgumentException("unknown subcommand " + args[0]);
        }
    }

    static void out(String event, Object... keyValues) {
        StringBuilder line = new StringBuilder(event);
        for (int i = 0; i < keyValues.length; i += 2) {
            line.append(' ').append(keyValues[i]).append('=').append(keyValues[i + 1]);
        }
        System.out.println(line);
        System.out.flush();
    }

    // -- producer -------------------------------------------------------------------------

    static Properties producerConfig(String bootstrap, String acks, String codec,
                                     boolean idempotence) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        // An idempotent producer starts with InitProducerId; only acks=all allows one.
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(idempotence));
        p.put(ProducerConfig.LINGER_MS_CONFIG, "20");  // the records of a send share a batch
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return p;
    }

    /** Topic TOPIC_PREFIX-CODEC gets RECORDS_PER_PRODUCER records from an acks=all and an
     * acks=1 producer, each record with a key and two headers. */
    static void produce(String bootstrap, String prefix, boolean idempotence) throws Exception {
        for (String codec : CODECS) {
            String topic = prefix + "-" + codec;
            for (String acks : ACKS) {
                boolean idempotent = idempotence && acks.equals("all");
                try (var producer = new KafkaProducer<String, String>(
                        producerConfig(bootstrap, acks, codec, idempotent))) {
                    List<Future<RecordMetadata>> sent = new ArrayList<>();
                    for (int i = 0; i < RECORDS_PER_PRODUCER; i++) {
                        String key = "k-" + acks + "-" + i;
                        var headers = new RecordHeaders();
                        headers.add("codec", bytes(codec));
                        headers.add("acks", bytes(acks));
                        sent.add(producer.send(new ProducerRecord<>(topic, null, key,
                                "v-" + codec + "-" + acks + "-" + i, headers)));
                    }
                    for (int i = 0; i < sent.size(); i++) {
                        RecordMetadata m = sent.get(i).get();
                        out("produced", "topic", m.topic(), "partition", m.partition(),
                            "offset", m.offset(), "key", "k-" + acks + "-" + i,
                            "idempotent", idempotent);
                    }
                }
            }
        }
    }

    // -- consumer group -------------------------------------------------------------------

    static KafkaConsumer<String, String> consumer(String bootstrap, String group,
                                                  String clientId) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        // The classic protocol (JoinGroup/SyncGroup); Kafkernel does not offer KIP-848's.
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
              StringDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    static void consume(String bootstrap, String group, List<String> topics, int count)
            throws Exception {
        try (var first = consumer(bootstrap, group, "java-first");
             var second = consumer(bootstrap, group, "java-second");
             var admin = Admin.create(bootstrapConfig(bootstrap))) {
            first.subscribe(topics);
            int seen = 0;
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (seen < count && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : first.poll(Duration.ofMillis(200))) {
                    seen++;
                    out("record", "topic", r.topic(), "partition", r.partition(),
                        "offset", r.offset(), "key", r.key(), "value", r.value(),
                        "headers", headers(r.headers()));
                }
            }
            out("assigned", "member", "java-first", "partitions", names(first.assignment()));
            first.commitSync(TIMEOUT);
            Map<TopicPartition, OffsetAndMetadata> committed =
                first.committed(first.assignment(), TIMEOUT);
            for (var e : new TreeMap<>(byName(committed)).entrySet()) {
                out("committed", "partition", e.getKey(), "offset", e.getValue().offset());
            }

            // A second member: the coordinator rebalances and the two split the partitions.
            second.subscribe(topics);
            int extra = 0;
            Set<TopicPartition> all = new HashSet<>(first.assignment());
            deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (System.nanoTime() < deadline) {
                extra += first.poll(Duration.ofMillis(100)).count();
                extra += second.poll(Duration.ofMillis(100)).count();
                Set<TopicPartition> a = first.assignment(), b = second.assignment();
                Set<TopicPartition> union = new HashSet<>(a);
                union.addAll(b);
                if (!a.isEmpty() && !b.isEmpty() && union.equals(all)
                        && a.size() + b.size() == all.size()) {
                    break;
                }
            }
            out("assigned", "member", "java-first", "partitions", names(first.assignment()));
            out("assigned", "member", "java-second", "partitions", names(second.assignment()));
            // Both resumed at the committed offsets: nothing is read twice.
            out("read-after-rebalance", "records", extra);

            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                .describedGroups().get(group).get();
            out("group", "id", d.groupId(), "state", d.groupState(), "type", d.type(),
                "assignor", d.partitionAssignor(), "members", d.members().size(),
                "coordinator", d.coordinator().id());
            for (MemberDescription m : d.members()) {
                out("member", "client", m.clientId(),
                    "partitions", names(m.assignment().topicPartitions()));
            }
        }
    }

    // -- admin ----------------------------------------------------------------------------

    static Properties bootstrapConfig(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        return p;
    }

    static void admin(String bootstrap) throws Exception {
        try (Admin admin = Admin.create(bootstrapConfig(bootstrap))) {
            DescribeClusterResult cluster = admin.describeCluster();
            Node controller = cluster.controller().get();
            Collection<Node> nodes = cluster.nodes().get();
            out("cluster", "id", cluster.clusterId().get(), "controller", controller.id(),
                "nodes", nodes.stream().map(n -> n.id() + "@" + n.host() + ":" + n.port())
                    .sorted().collect(Collectors.joining(",")));
            String brokerId = Integer.toString(nodes.iterator().next().id());

            admin.createTopics(List.of(
                new NewTopic("admin-a", 2, (short) 1).configs(Map.of("retention.ms", "3600000")),
                new NewTopic("admin-b", 1, (short) 1))).all().get();
            out("created", "topics", "admin-a,admin-b");
            out("listed", "topics", sorted(admin.listTopics().names().get()));
            describeTopics(admin, "admin-a", "admin-b");

            var topicA = new ConfigResource(ConfigResource.Type.TOPIC, "admin-a");
            describeConfigs(admin, topicA, "retention.ms", "cleanup.policy");
            admin.incrementalAlterConfigs(Map.of(topicA, List.of(
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"),
                                  AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("retention.ms", null),
                                  AlterConfigOp.OpType.DELETE)))).all().get();
            out("altered", "resource", "topic:admin-a");
            describeConfigs(admin, topicA, "retention.ms", "cleanup.policy");
            var broker = new ConfigResource(ConfigResource.Type.BROKER, brokerId);
            describeConfigs(admin, broker, "log.retention.ms", "num.partitions");
            admin.incrementalAlterConfigs(Map.of(broker, List.of(
                new AlterConfigOp(new ConfigEntry("log.retention.ms", "7200000"),
                                  AlterConfigOp.OpType.SET)))).all().get();
            out("altered", "resource", "broker:" + brokerId);
            describeConfigs(admin, broker, "log.retention.ms", "num.partitions");

            admin.createPartitions(Map.of("admin-b", NewPartitions.increaseTo(3))).all().get();
            out("created-partitions", "topic", "admin-b", "total", 3);
            describeTopics(admin, "admin-b");

            var b0 = new TopicPartition("admin-b", 0);
            try (var producer = new KafkaProducer<String, String>(
                    producerConfig(bootstrap, "all", "none", false))) {
                for (int i = 0; i < 5; i++) {
                    producer.send(new ProducerRecord<>("admin-b", 0, "k" + i, "v" + i)).get();
                }
            }
            var deleted = admin.deleteRecords(Map.of(b0, RecordsToDelete.beforeOffset(3)))
                .lowWatermarks().get(b0).get();
            out("deleted-records", "partition", b0, "low_watermark", deleted.lowWatermark());
            listOffsets(admin, b0);

            String group = "admin-group";
            try (var member = consumer(bootstrap, group, "java-admin")) {
                member.commitSync(Map.of(b0, new OffsetAndMetadata(4, "checkpoint")), TIMEOUT);
            }
            listGroups(admin);
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                .describedGroups().get(group).get();
            out("group", "id", d.groupId(), "state", d.groupState(), "type", d.type(),
                "members", d.members().size(), "coordinator", d.coordinator().id());
            Map<TopicPartition, OffsetAndMetadata> offsets =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            for (var e : new TreeMap<>(byName(offsets)).entrySet()) {
                out("group-offset", "group", group, "partition", e.getKey(),
                    "offset", e.getValue().offset(), "metadata", e.getValue().metadata());
            }
            admin.deleteConsumerGroups(List.of(group)).all().get();
            out("deleted-group", "group", group);
            listGroups(admin);

            admin.deleteTopics(List.of("admin-a", "admin-b")).all().get();
            out("deleted", "topics", "admin-a,admin-b");
            out("listed", "topics", sorted(admin.listTopics().names().get()));
        }
    }

    static void describeTopics(Admin admin, String... topics) throws Exception {
        Map<String, TopicDescription> described =
            admin.describeTopics(List.of(topics)).allTopicNames().get();
        for (String name : topics) {
            TopicDescription t = described.get(name);
            for (TopicPartitionInfo p : t.partitions()) {
                out("partition", "topic", t.name(), "internal", t.isInternal(),
                    "partition", p.partition(), "leader", p.leader().id(),
                    "replicas", ids(p.replicas()), "isr", ids(p.isr()));
            }
        }
    }

    static void describeConfigs(Admin admin, ConfigResource resource, String... names)
            throws Exception {
        Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
        for (String name : names) {
            ConfigEntry e = config.get(name);
            out("config", "resource", resource.type().name().toLowerCase() + ":"
                + resource.name(), "name", name, "value", e == null ? "absent" : e.value(),
                "source", e == null ? "-" : e.source());
        }
    }

    static void listOffsets(Admin admin, TopicPartition tp) throws Exception {
        ListOffsetsResult.ListOffsetsResultInfo earliest =
            admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get();
        ListOffsetsResult.ListOffsetsResultInfo latest =
            admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get();
        out("offsets", "partition", tp, "earliest", earliest.offset(),
            "latest", latest.offset());
    }

    @SuppressWarnings("deprecation")  // listConsumerGroups: the call the brief names
    static void listGroups(Admin admin) throws Exception {
        Collection<ConsumerGroupListing> groups = admin.listConsumerGroups().all().get();
        out("groups", "ids", groups.stream().map(g -> g.groupId() + ":"
            + g.groupState().map(Object::toString).orElse("?")).sorted()
            .collect(Collectors.joining(",")));
    }

    // -- formatting -----------------------------------------------------------------------

    // -- transactions ---------------------------------------------------------------------

    static KafkaProducer<String, String> transactionalProducer(String bootstrap, String txnId) {
        Properties p = producerConfig(bootstrap, "all", "none", true);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        var producer = new KafkaProducer<String, String>(p, new StringSerializer(),
                new StringSerializer());
        producer.initTransactions();
        return producer;
    }

    static void transactions(String bootstrap, String topic, String txnId, String group)
            throws Exception {
        try (Admin admin = Admin.create(bootstrapConfig(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
        }
        var first = transactionalProducer(bootstrap, txnId);
        first.beginTransaction();
        for (int i = 0; i < 4; i++) {
            first.send(new ProducerRecord<>(topic, i % 2, "k" + i, "committed-" + i));
        }
        first.sendOffsetsToTransaction(
                Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(2)),
                new ConsumerGroupMetadata(group));
        first.commitTransaction();
        out("committed", "records", 4);
        first.beginTransaction();
        for (int i = 0; i < 2; i++) {
            first.send(new ProducerRecord<>(topic, i % 2, "k" + i, "aborted-" + i));
        }
        first.flush();
        first.abortTransaction();
        out("aborted", "records", 2);
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            for (String value : readAll(bootstrap, topic, isolation)) {
                out("read", "isolation", isolation, "value", value);
            }
        }
        try (Admin admin = Admin.create(bootstrapConfig(bootstrap))) {
            var offsets = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get();
            for (var e : offsets.entrySet()) {
                out("group-offset", "partition", e.getKey().partition(),
                        "offset", e.getValue().offset());
            }
        }
        // A second producer with the same transactional id fences the first.
        try (var second = transactionalProducer(bootstrap, txnId)) {
            try {
                first.beginTransaction();
                first.send(new ProducerRecord<>(topic, 0, "k", "fenced")).get();
                first.commitTransaction();
                out("fenced", "exception", "none");
            } catch (Exception e) {
                Throwable cause = e.getCause() != null ? e.getCause() : e;
                out("fenced", "exception", e instanceof ProducerFencedException
                        ? e.getClass().getSimpleName() : cause.getClass().getSimpleName());
            } finally {
                first.close(Duration.ZERO);
            }
        }
    }

    /** Every record of both partitions from the start, up to the end offset the
     * isolation level allows (the last stable offset under read_committed). */
    static List<String> readAll(String bootstrap, String topic, String isolation) {
        Properties p = bootstrapConfig(bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        List<String> values = new ArrayList<>();
        try (var consumer = new KafkaConsumer<String, String>(p, new StringDeserializer(),
                new StringDeserializer())) {
            var partitions = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> end = consumer.endOffsets(partitions);
            long deadline = System.currentTimeMillis() + TIMEOUT.toMillis();
            while (partitions.stream().anyMatch(tp -> consumer.position(tp) < end.get(tp))
                    && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    values.add(r.value());
                }
            }
        }
        return values;
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String headers(Iterable<Header> headers) {
        List<String> parts = new ArrayList<>();
        for (Header h : headers) {
            parts.add(h.key() + ":" + new String(h.value(), StandardCharsets.UTF_8));
        }
        return String.join(",", parts);
    }

    static String ids(List<Node> nodes) {
        return nodes.stream().map(n -> Integer.toString(n.id())).collect(Collectors.joining(","));
    }

    static String names(Collection<TopicPartition> partitions) {
        return partitions.isEmpty() ? "-" : sorted(partitions.stream()
            .map(TopicPartition::toString).collect(Collectors.toSet()));
    }

    static <V> Map<String, V> byName(Map<TopicPartition, V> map) {
        Map<String, V> out = new HashMap<>();
        map.forEach((tp, v) -> out.put(tp.toString(), v));
        return out;
    }

    static String sorted(Collection<String> names) {
        return names.isEmpty() ? "-" : String.join(",", new TreeSet<>(names));
    }
}
