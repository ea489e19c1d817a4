#!/usr/bin/python3
"""Ravnest's cluster formation, for bench/planner.sh's comparison (issue 26).

    ravnest_ga.py POOL_JSON FULL_MODEL_MB [SEED] > clusters.json

POOL_JSON is a node_configs.json (bench_planner --write-pool); FULL_MODEL_MB is the model's size
as Ravnest measures it (get_memory_reqs(), MB); prints the clusters as a JSON list of lists of node
ids, and on stderr one line "ga: S s, C clusters". Standard library only.

Ravnest's (github.com/ravenprotocol/ravnest, ravnest/operations/genetic.py at the fetched HEAD):
every function from initialize_population to genetic_algorithm, copied unchanged, with the
defaults clusterize() calls it with (population 200, at most 5 clusters, 500 generations,
mutation rate 0.01); the RAM scaling of spawn_node_pool() (benchmarks' GB x 1024 = MB); the
renumbering of cluster_formation(). Filled in here: reading the pool without Ravnest's Node class
(a stand-in with the same .benchmarks), seeding `random`, and the JSON output. Ravnest's own
check that every cluster's RAM exceeds the model (calculate_split_percentages raises ValueError)
is reported, not raised: bench_planner scores such a cluster as it scores any other.
"""
import json
import random
import sys
import time


# ---- ravnest/operations/genetic.py, unchanged ----------------------------------------------
def initialize_population(nodes, population_size, max_clusters):
    return [[random.randint(0, max_clusters - 1) for _ in nodes] for _ in range(population_size)]

def calculate_fitness(individual, nodes, L, t):
    clusters = {}
    for index, cluster_id in enumerate(individual):
        clusters.setdefault(cluster_id, {'ram':0, 'speed':0})
        clusters[cluster_id]['ram'] += nodes[index].benchmarks['ram']
        clusters[cluster_id]['speed'] += nodes[index].benchmarks['ram']//nodes[index].benchmarks['bandwidth']

    penalty_L = 0
    for cluster_spec in list(clusters.values()):
        if cluster_spec['ram'] <= L:
            penalty_L += (L - cluster_spec['ram'])

    penalty_t = 0
    speeds = []
    for cluster_spec in list(clusters.values()):
        speeds.append(cluster_spec['speed'])

    penalty_t = max(speeds) - min(speeds)
    penalty = 100 * penalty_L + penalty_t
    return penalty

def select_parents(population, fitness):
    tournament_size = 5
    parents = []
    for _ in range(2):
        tournament = random.sample(list(zip(population, fitness)), tournament_size)
        tournament.sort(key=lambda x: x[1])
        parents.append(tournament[0][0])
    return parents

def crossover(parent1, parent2):
    crossover_point = random.randint(1, len(parent1) - 1)
    return parent1[:crossover_point] + parent2[crossover_point:], parent2[:crossover_point] + parent1[crossover_point:]

def mutate(individual, mutation_rate, max_clusters):
    return [random.randint(0, max_clusters - 1) if random.random() < mutation_rate else gene for gene in individual]

def decode_solution(solution, numbers):
    clusters = {}
    for num, cluster_id in zip(numbers, solution):
        clusters.setdefault(cluster_id, []).append(num)
    return clusters

def genetic_algorithm(nodes, L, t=0, population_size=200, max_clusters=5, generations=500, mutation_rate=0.01):
    population = initialize_population(nodes, population_size, max_clusters)
    best_individual = None
    best_fitness = 1000000
    for generation in range(generations):
        fitness = []
        for individual in population:
            fit = calculate_fitness(individual, nodes, L, t)
            if fit < best_fitness:
                best_individual = individual
                best_fitness = fit
            fitness.append(fit)
        # if 0 in fitness:
        #     return decode_solution(population[fitness.index(0)], numbers)
        new_population = []
        for _ in range(population_size // 2):
            parents = select_parents(population, fitness)
            child1, child2 = crossover(*parents)
            new_population.extend([mutate(child1, mutation_rate, max_clusters), mutate(child2, mutation_rate, max_clusters)])
        population = new_population

    return decode_solution(best_individual, nodes)
# ---- end of Ravnest's code -------------------------------------------------------------------


class Node:
    """The fields of ravnest.operations.node.Node the GA reads."""
    def __init__(self, node_id, benchmarks):
        self.node_id = node_id
        self.benchmarks = benchmarks


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: ravnest_ga.py POOL_JSON FULL_MODEL_MB [SEED]")
    path, full_model_size = sys.argv[1], int(sys.argv[2])
    random.seed(int(sys.argv[3]) if len(sys.argv) == 4 else 1)
    with open(path) as f:
        configs = json.load(f)
    nodes = []
    for nid in range(len(configs)):  # spawn_node_pool(mode='load_from_configs')
        benchmarks = dict(configs[str(nid)]['benchmarks'])
        benchmarks['ram'] *= 1024
        nodes.append(Node(nid, benchmarks))
    start = time.perf_counter()
    prelim = genetic_algorithm(nodes, full_model_size)
    seconds = time.perf_counter() - start
    prelim = dict(sorted(prelim.items()))  # cluster_formation()'s renumbering
    clusters = [[n.node_id for n in members] for members in prelim.values()]
    short = sum(1 for members in prelim.values()
                if sum(n.benchmarks['ram'] for n in members) < full_model_size)
    print(json.dumps(clusters))
    print("ga: %.2f s, %d clusters, %d of them short of the %d MB given (Ravnest raises on those)"
          % (seconds, len(clusters), short, full_model_size), file=sys.stderr)


if __name__ == "__main__":
    main()
