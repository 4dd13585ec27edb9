package io.streamflow.devregistry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.List;
import javax.enterprise.inject.Produces;
import javax.inject.Singleton;

/**
 * The index of settings that Apicurio's admin API may change at run time.
 *
 * <p>Apicurio's build makes it with a Quarkus extension whose deployment half Maven Central does
 * not serve (see pom.xml). An empty index means no setting is changeable at run time: each one is
 * read from static config, which is all a development registry needs.
 */
public class DynamicSettings {
    @Produces
    @Singleton
    DynamicConfigPropertyList dynamicConfigProperties() {
        return new DynamicConfigPropertyList(List.of());
    }
}
