package io.streamflow.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.generic.GenericRecord;

/**
 * Plain JSON to Avro generic data of a schema, and back.
 *
 * <p>Plain JSON, not Avro's JSON encoding: a union's value is written bare (no {@code
 * {"int": 5}} wrapper), as a person or another program writes it; the branch is the first whose
 * type fits. Bytes and fixed are strings of code points 0-255, as in Avro's JSON encoding.
 * Logical types are left to their underlying types: this is a test tool, not a converter.
 */
final class JsonDatum {
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  private JsonDatum() {}

  /** JSON that does not fit the schema; the message names the field. */
  static final class Mismatch extends RuntimeException {
    private static final long serialVersionUID = 1L;

    Mismatch(String message) {
      super(message);
    }
  }

  static Object fromJson(JsonNode node, Schema schema) {
    return fromJson(node, schema, schema.getName());
  }

  private static Object fromJson(JsonNode node, Schema schema, String path) {
    switch (schema.getType()) {
      case RECORD:
        expect(node.isObject(), node, schema, path);
        GenericRecord record = new GenericData.Record(schema);
        for (Schema.Field field : schema.getFields()) {
          JsonNode value = node.get(field.name());
          if (value == null && field.hasDefaultValue()) {
            record.put(field.pos(), GenericData.get().getDefaultValue(field));
          } else if (value == null) {
            throw new Mismatch(path + "." + field.name() + " is missing and has no default");
          } else {
            record.put(field.pos(), fromJson(value, field.schema(), path + "." + field.name()));
          }
        }
        return record;
      case UNION:
        for (Schema branch : schema.getTypes()) {
          try {
            return fromJson(node, branch, path);
          } catch (Mismatch ignored) {
            // the next branch may fit
          }
        }
        throw mismatch(node, schema, path);
      case ENUM:
        expect(node.isTextual() && schema.hasEnumSymbol(node.asText()), node, schema, path);
        return new GenericData.EnumSymbol(schema, node.asText());
      case ARRAY:
        expect(node.isArray(), node, schema, path);
        List<Object> items = new ArrayList<>();
        for (JsonNode item : node) {
          items.add(fromJson(item, schema.getElementType(), path + "[" + items.size() + "]"));
        }
        return new GenericData.Array<>(schema, items);
      case MAP:
        expect(node.isObject(), node, schema, path);
        Map<String, Object> entries = new LinkedHashMap<>();
        for (Map.Entry<String, JsonNode> entry : node.properties()) {
          String key = entry.getKey();
          entries.put(key, fromJson(entry.getValue(), schema.getValueType(), path + "." + key));
        }
        return entries;
      case FIXED:
        expect(node.isTextual(), node, schema, path);
        expect(latin1(node).length == schema.getFixedSize(), node, schema, path);
        return new GenericData.Fixed(schema, latin1(node));
      case STRING:
        expect(node.isTextual(), node, schema, path);
        return node.asText();
      case BYTES:
        expect(node.isTextual(), node, schema, path);
        return ByteBuffer.wrap(latin1(node));
      case INT:
        expect(node.isIntegralNumber() && node.canConvertToInt(), node, schema, path);
        return node.intValue();
      case LONG:
        expect(node.isIntegralNumber() && node.canConvertToLong(), node, schema, path);
        return node.longValue();
      case FLOAT:
        expect(node.isNumber(), node, schema, path);
        return node.floatValue();
      case DOUBLE:
        expect(node.isNumber(), node, schema, path);
        return node.doubleValue();
      case BOOLEAN:
        expect(node.isBoolean(), node, schema, path);
        return node.booleanValue();
      case NULL:
        expect(node.isNull(), node, schema, path);
        return null;
      default:
        throw new Mismatch(path + ": the type " + schema.getType() + " is not supported");
    }
  }

  static JsonNode toJson(Object datum, Schema schema) {
    switch (schema.getType()) {
      case RECORD:
        ObjectNode object = NODES.objectNode();
        GenericRecord record = (GenericRecord) datum;
        for (Schema.Field field : schema.getFields()) {
          object.set(field.name(), toJson(record.get(field.pos()), field.schema()));
        }
        return object;
      case UNION:
        int branch = GenericData.get().resolveUnion(schema, datum);
        return toJson(datum, schema.getTypes().get(branch));
      case ARRAY:
        ArrayNode array = NODES.arrayNode();
        for (Object item : (Collection<?>) datum) {
          array.add(toJson(item, schema.getElementType()));
        }
        return array;
      case MAP:
        ObjectNode map = NODES.objectNode();
        for (Map.Entry<?, ?> entry : ((Map<?, ?>) datum).entrySet()) {
          map.set(entry.getKey().toString(), toJson(entry.getValue(), schema.getValueType()));
        }
        return map;
      case FIXED:
        byte[] fixed = ((GenericFixed) datum).bytes();
        return NODES.textNode(new String(fixed, StandardCharsets.ISO_8859_1));
      case BYTES:
        ByteBuffer buffer = ((ByteBuffer) datum).duplicate();
        byte[] bytes = new byte[buffer.remaining()];
        buffer.get(bytes);
        return NODES.textNode(new String(bytes, StandardCharsets.ISO_8859_1));
      case ENUM:
      case STRING:
        return NODES.textNode(datum.toString());
      case INT:
        return NODES.numberNode((Integer) datum);
      case LONG:
        return NODES.numberNode((Long) datum);
      case FLOAT:
        return NODES.numberNode((Float) datum);
      case DOUBLE:
        return NODES.numberNode((Double) datum);
      case BOOLEAN:
        return NODES.booleanNode((Boolean) datum);
      case NULL:
        return NODES.nullNode();
      default:
        throw new IllegalArgumentException("the type " + schema.getType() + " is not supported");
    }
  }

  private static byte[] latin1(JsonNode node) {
    String text = node.asText();
    for (int i = 0; i < text.length(); i++) {
      if (text.charAt(i) > 0xff) {
        throw new Mismatch("bytes are written as code points 0-255, not " + text.charAt(i));
      }
    }
    return text.getBytes(StandardCharsets.ISO_8859_1);
  }

  private static void expect(boolean fits, JsonNode node, Schema schema, String path) {
    if (!fits) {
      throw mismatch(node, schema, path);
    }
  }

  private static Mismatch mismatch(JsonNode node, Schema schema, String path) {
    return new Mismatch(path + ": " + node + " does not fit " + describe(schema));
  }

  private static String describe(Schema schema) {
    if (schema.getType() != Schema.Type.UNION) {
      return schema.getFullName();
    }
    List<String> branches = new ArrayList<>();
    for (Schema branch : schema.getTypes()) {
      branches.add(branch.getFullName());
    }
    return "the union [" + String.join(", ", branches) + "]";
  }
}
