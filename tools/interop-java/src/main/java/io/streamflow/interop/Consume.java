package io.streamflow.interop;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import org.apache.avro.AvroRuntimeException;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/** {@code consume}: a topic from its start, each value decoded by Avro, one JSON line each. */
final class Consume {
  private static final Duration MAX_POLL = Duration.ofMillis(500);

  private Consume() {}

  static int run(Map<String, String> options) {
    Schema reader = Main.schema(options, "schema");
    int count = Main.positiveInt(options, "count");
    int timeoutSeconds = Main.positiveInt(options, "timeout-s");
    String topic = options.get("topic");
    BinaryMessageDecoder<GenericRecord> decoder =
        new BinaryMessageDecoder<>(GenericData.get(), reader);
    if (options.containsKey("writer-schema")) {
      decoder.addSchema(Main.schema(options, "writer-schema"));
    }

    Properties config = new Properties();
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, options.get("bootstrap"));
    // a group of its own, so every run reads the whole topic and commits nothing anyone shares
    config.put(ConsumerConfig.GROUP_ID_CONFIG, "streamflow-interop-" + UUID.randomUUID());
    config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");

    ObjectMapper json = new ObjectMapper();
    // UTF-8 whatever the locale: System.out would turn non-ASCII text into '?' under POSIX
    BufferedWriter out =
        new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
    long deadline = System.nanoTime() + Duration.ofSeconds(timeoutSeconds).toNanos();
    int got = 0;
    try (KafkaConsumer<byte[], byte[]> consumer =
        new KafkaConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      consumer.subscribe(List.of(topic));
      while (got < count) {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
          out.flush();
          throw new Main.Failure("timed out after " + timeoutSeconds + " s: got " + got + " of "
              + count + " records from " + topic);
        }
        Duration wait = Duration.ofNanos(Math.min(left, MAX_POLL.toNanos()));
        for (ConsumerRecord<byte[], byte[]> message : consumer.poll(wait)) {
          GenericRecord record = decode(decoder, message);
          out.write(json.writeValueAsString(JsonDatum.toJson(record, record.getSchema())));
          out.newLine();
          if (++got == count) {
            break;
          }
        }
      }
      out.flush();
    } catch (KafkaException error) {
      throw new Main.Failure("could not consume " + topic + ": " + error.getMessage());
    } catch (IOException error) {
      throw new UncheckedIOException(error);
    }
    System.err.println("consumed " + got + " records from " + topic);
    return 0;
  }

  private static GenericRecord decode(
      BinaryMessageDecoder<GenericRecord> decoder, ConsumerRecord<byte[], byte[]> message) {
    String where = message.topic() + "-" + message.partition() + "@" + message.offset();
    if (message.value() == null) {
      throw new Main.Failure("the record at " + where + " has no value");
    }
    try {
      return decoder.decode(message.value());
    } catch (IOException | AvroRuntimeException error) {
      throw new Main.Failure("could not decode the record at " + where + ": " + error);
    }
  }
}
