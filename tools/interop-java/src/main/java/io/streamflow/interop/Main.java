package io.streamflow.interop;

import java.io.File;
import java.io.IOException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.avro.Schema;
import org.apache.avro.SchemaParseException;

/**
 * Writes and reads Kafka records the way a Java service that knows only Apache Avro would.
 *
 * <pre>
 *   produce --bootstrap B --topic T --schema file.avsc --input records.jsonl [--key-field F]
 *   consume --bootstrap B --topic T --schema file.avsc --count N --timeout-s S [--writer-schema w.avsc]
 * </pre>
 *
 * <p>Values are Avro single-object encoded by Avro's own {@code BinaryMessageEncoder} and
 * decoded by its {@code BinaryMessageDecoder}; nothing here knows about streamflow, so what
 * streamflow reads from or writes for this program is what any Avro user gets.
 *
 * <p>Exit codes: 0 done, 1 a failure at run time (Kafka, a record, a timeout), 2 a bad command
 * line or input file.
 */
public final class Main {
  private static final String USAGE =
      String.join(
          "\n",
          "usage:",
          "  produce --bootstrap B --topic T --schema file.avsc --input records.jsonl"
              + " [--key-field F]",
          "  consume --bootstrap B --topic T --schema file.avsc --count N --timeout-s S"
              + " [--writer-schema w.avsc]");

  private static final Map<String, Set<String>> REQUIRED =
      Map.of(
          "produce", Set.of("bootstrap", "topic", "schema", "input"),
          "consume", Set.of("bootstrap", "topic", "schema", "count", "timeout-s"));
  private static final Map<String, Set<String>> OPTIONAL =
      Map.of("produce", Set.of("key-field"), "consume", Set.of("writer-schema"));

  private Main() {}

  public static void main(String[] args) {
    // before the first logger exists: the Kafka clients' INFO lines would bury the output
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
    int code;
    try {
      code = run(args);
    } catch (UsageError error) {
      System.err.println("interop: " + error.getMessage());
      System.err.println(USAGE);
      code = 2;
    } catch (Failure failure) {
      System.err.println("interop: " + failure.getMessage());
      code = 1;
    }
    System.exit(code);
  }

  private static int run(String[] args) {
    if (args.length == 0 || !REQUIRED.containsKey(args[0])) {
      throw new UsageError(args.length == 0 ? "no command given" : "unknown command " + args[0]);
    }
    String command = args[0];
    Map<String, String> options = parseOptions(command, List.of(args).subList(1, args.length));
    return command.equals("produce") ? Produce.run(options) : Consume.run(options);
  }

  private static Map<String, String> parseOptions(String command, List<String> args) {
    Map<String, String> options = new HashMap<>();
    for (int i = 0; i < args.size(); i += 2) {
      String flag = args.get(i);
      String name = flag.startsWith("--") ? flag.substring(2) : "";
      if (!REQUIRED.get(command).contains(name) && !OPTIONAL.get(command).contains(name)) {
        throw new UsageError(command + " takes no option " + flag);
      }
      if (i + 1 >= args.size()) {
        throw new UsageError(flag + " needs a value");
      }
      options.put(name, args.get(i + 1));
    }
    for (String name : REQUIRED.get(command)) {
      if (!options.containsKey(name)) {
        throw new UsageError(command + " needs --" + name);
      }
    }
    return options;
  }

  static int positiveInt(Map<String, String> options, String name) {
    String text = options.get(name);
    try {
      int value = Integer.parseInt(text);
      if (value > 0) {
        return value;
      }
    } catch (NumberFormatException ignored) {
      // reported below, with the others
    }
    throw new UsageError("--" + name + " expects a positive whole number, got " + text);
  }

  static Schema schema(Map<String, String> options, String name) {
    String path = options.get(name);
    try {
      return new Schema.Parser().parse(new File(path));
    } catch (IOException | SchemaParseException error) {
      throw new UsageError("--" + name + " " + path + ": " + error.getMessage());
    }
  }

  /** A mistake in the command line or its files: reported with the usage, exit 2. */
  static final class UsageError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    UsageError(String message) {
      super(message);
    }
  }

  /** A failure at run time: reported on its own, exit 1. */
  static final class Failure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    Failure(String message) {
      super(message);
    }
  }
}
