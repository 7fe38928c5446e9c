"""The price catalog over REST: anyone signed in reads the prices in force; operators set a pool's price."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from billing_app.api.serializers import PoolPriceSerializer, SetPoolPriceSerializer
from billing_app.selectors import prices_in_force
from billing_app.services import set_pool_price
from portal.api.permissions import MaySetPrices
from scheduler_app.models import Pool


class PriceListView(APIView):
    """The price in force now of every priced pool, per whole GPU-hour in USD (decimal strings).
    Unpriced pools are left out."""

    @extend_schema(responses=PoolPriceSerializer(many=True), tags=["prices"])
    def get(self, request):
        return Response(PoolPriceSerializer(prices_in_force(), many=True).data)


class PoolPriceView(APIView):
    """Operators price a pool from now (or a later effective_from); earlier prices stay in the history."""

    permission_classes = [MaySetPrices]

    @extend_schema(
        request=SetPoolPriceSerializer,
        responses=PoolPriceSerializer,
        parameters=[OpenApiParameter("name", str, OpenApiParameter.PATH, description="The pool's name.")],
        tags=["prices"],
    )
    def put(self, request, name):
        form = SetPoolPriceSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        pool = get_object_or_404(Pool, name=name)
        price = set_pool_price(pool, actor=request.user, **form.validated_data)
        return Response(PoolPriceSerializer(price).data)
