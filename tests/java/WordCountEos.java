import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Arrays;
import java.util.Properties;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.Stores;

/**
 * A Kafka Streams word count with processing.guarantee=exactly_once_v2, driven by
 * tests/java/test_transactions_streams.py: the words of each INPUT record's value are
 * counted (through a repartition topic, into an in-memory store with a changelog) and
 * each new count goes to OUTPUT (key: the word, value: the count as a long). It runs
 * until its stdin is closed, printing "state NEW_STATE" lines as Streams changes state.
 *
 *   BOOTSTRAP APPLICATION_ID INPUT OUTPUT
 */
public final class WordCountEos {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.STATE_DIR_CONFIG,
              Files.createTempDirectory("wordcount-eos").toString());
        // Without a record cache every count is sent on, so the test sees the final ones.
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.split(" ")))
            .groupBy((key, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
            .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
            .toStream()
            .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

        try (KafkaStreams streams = new KafkaStreams(builder.build(), p)) {
            streams.setStateListener((now, before) -> {
                System.out.println("state " + now);
                System.out.flush();
            });
            streams.start();
            BufferedReader stdin = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8));
            while (stdin.readLine() != null) {
                // runs until the test closes stdin
            }
        }
    }
}
