package io.streamflow.interop;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** {@code produce}: JSON lines, made GenericRecords of the schema, single-object encoded. */
final class Produce {
  private Produce() {}

  static int run(Map<String, String> options) {
    Schema schema = Main.schema(options, "schema");
    if (schema.getType() != Schema.Type.RECORD) {
      throw new Main.UsageError("--schema must be a record schema, not " + schema.getType());
    }
    String keyField = options.get("key-field");
    if (keyField != null && schema.getField(keyField) == null) {
      throw new Main.UsageError("--key-field " + keyField + ": " + schema.getFullName()
          + " has no such field");
    }
    String topic = options.get("topic");
    List<GenericRecord> records = read(Path.of(options.get("input")), schema);
    BinaryMessageEncoder<GenericRecord> encoder =
        new BinaryMessageEncoder<>(GenericData.get(), schema);

    Properties config = new Properties();
    config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, options.get("bootstrap"));
    config.put(ProducerConfig.ACKS_CONFIG, "all");
    config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
    AtomicReference<Exception> failed = new AtomicReference<>();
    try (KafkaProducer<String, byte[]> producer =
        new KafkaProducer<>(config, new StringSerializer(), new ByteArraySerializer())) {
      for (GenericRecord record : records) {
        Object key = keyField == null ? null : record.get(keyField);
        ProducerRecord<String, byte[]> message =
            new ProducerRecord<>(topic, key == null ? null : key.toString(), encode(encoder, record));
        producer.send(message, (metadata, error) -> {
          if (error != null) {
            failed.compareAndSet(null, error);
          }
        });
      }
      producer.flush();
    } catch (KafkaException error) {
      throw new Main.Failure("could not produce to " + topic + ": " + error.getMessage());
    }
    if (failed.get() != null) {
      throw new Main.Failure("could not produce to " + topic + ": " + failed.get().getMessage());
    }
    System.out.println("produced " + records.size() + " records to " + topic);
    return 0;
  }

  private static List<GenericRecord> read(Path input, Schema schema) {
    ObjectMapper json = new ObjectMapper();
    List<GenericRecord> records = new ArrayList<>();
    try (BufferedReader reader = Files.newBufferedReader(input, StandardCharsets.UTF_8)) {
      int number = 0;
      for (String line = reader.readLine(); line != null; line = reader.readLine()) {
        number++;
        if (line.isBlank()) {
          continue;
        }
        try {
          records.add((GenericRecord) JsonDatum.fromJson(json.readTree(line), schema));
        } catch (JsonProcessingException | JsonDatum.Mismatch error) {
          throw new Main.UsageError(input + ":" + number + ": " + error.getMessage());
        }
      }
    } catch (IOException error) {
      throw new Main.UsageError("--input " + input + ": " + error);
    }
    return records;
  }

  private static byte[] encode(BinaryMessageEncoder<GenericRecord> encoder, GenericRecord record) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try {
      encoder.encode(record, out);
    } catch (IOException error) {
      throw new Main.Failure("could not encode " + record + ": " + error.getMessage());
    }
    return out.toByteArray();
  }
}
