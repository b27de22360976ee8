import java.io.File;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Optional;
import java.util.Set;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.raft.ElectionState;
import org.apache.kafka.raft.FileQuorumStateStore;
import org.apache.kafka.raft.ReplicaKey;
import org.apache.kafka.server.common.KRaftVersion;

/**
 * Kafka's own quorum-state store, for tests/java/test_quorum_state.py: writes three
 * election states into the directory given as the first argument (kafka-*), then reads
 * every other file named there and prints what Kafka makes of it.
 */
public class QuorumStateCheck {
    public static void main(String[] args) {
        File dir = new File(args[0]);
        Set<Integer> voters = new HashSet<>(Arrays.asList(1, 2, 3));
        new FileQuorumStateStore(new File(dir, "kafka-v1-voted")).writeElectionState(
            ElectionState.withVotedCandidate(
                2, ReplicaKey.of(1, Uuid.fromString("J8aAA8fLQt2bqs1JT-xMgQ")), voters),
            KRaftVersion.KRAFT_VERSION_1);
        new FileQuorumStateStore(new File(dir, "kafka-v1-unknown")).writeElectionState(
            ElectionState.withUnknownLeader(1, voters), KRaftVersion.KRAFT_VERSION_1);
        new FileQuorumStateStore(new File(dir, "kafka-v0-leader")).writeElectionState(
            ElectionState.withElectedLeader(
                5, 3, Optional.of(ReplicaKey.of(3, ReplicaKey.NO_DIRECTORY_ID)), voters),
            KRaftVersion.KRAFT_VERSION_0);
        for (int i = 1; i < args.length; i++) {
            ElectionState state = new FileQuorumStateStore(new File(dir, args[i]))
                .readElectionState().orElseThrow();
            String voted = state.optionalVotedKey()
                .map(k -> k.id() + ":" + k.directoryId().map(Uuid::toString).orElse("-"))
                .orElse("-");
            System.out.println("read " + args[i] + " epoch=" + state.epoch()
                + " leader=" + state.leaderIdOrSentinel() + " voted=" + voted);
        }
    }
}
